package files

import (
	"fmt"
	"io/fs"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/wire/agentv1"
)

// specialBits pairs the wire's Unix bits with Go's mode bits.
var specialBits = []struct {
	unix uint32
	mode fs.FileMode
}{
	{0o4000, fs.ModeSetuid},
	{0o2000, fs.ModeSetgid},
	{0o1000, fs.ModeSticky},
}

// parseMode turns a wire mode into a fs.FileMode, def when m is 0. Type bits and anything
// beyond 07777 are refused rather than silently dropped, and so are setuid and setgid: a
// sandbox never makes a set-id file, which on the host would run as its owner.
func parseMode(m uint32, def fs.FileMode) (fs.FileMode, error) {
	if m == 0 {
		return def, nil
	}
	if m&^0o7777 != 0 {
		return 0, fmt.Errorf("mode %#o has bits beyond 07777: %w", m, errdefs.ErrInvalidArgument)
	}
	if m&0o6000 != 0 {
		return 0, fmt.Errorf("mode %#o sets setuid or setgid, which no file in a sandbox may have: %w", m, errdefs.ErrInvalidArgument)
	}
	mode := fs.FileMode(m & 0o777)
	for _, b := range specialBits {
		if m&b.unix != 0 {
			mode |= b.mode
		}
	}
	return mode, nil
}

// wireMode is parseMode's inverse for what we report.
func wireMode(mode fs.FileMode) uint32 {
	m := uint32(mode.Perm())
	for _, b := range specialBits {
		if mode&b.mode != 0 {
			m |= b.unix
		}
	}
	return m
}

// infoOf describes fi at rel; target is the symlink's stored target, if it is one.
func infoOf(rel string, fi fs.FileInfo, target string) *agentv1.FileInfo {
	return &agentv1.FileInfo{
		Path:          rel,
		Type:          fileType(fi.Mode()),
		Size:          uint64(max(fi.Size(), 0)),
		Mode:          wireMode(fi.Mode()),
		MtimeUnixNano: fi.ModTime().UnixNano(),
		LinkTarget:    target,
	}
}

func fileType(mode fs.FileMode) agentv1.FileType {
	switch {
	case mode.IsRegular():
		return agentv1.FileType_FILE_TYPE_FILE
	case mode.IsDir():
		return agentv1.FileType_FILE_TYPE_DIR
	case mode&fs.ModeSymlink != 0:
		return agentv1.FileType_FILE_TYPE_SYMLINK
	}
	return agentv1.FileType_FILE_TYPE_OTHER
}
