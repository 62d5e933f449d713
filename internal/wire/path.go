package wire

import (
	"fmt"
	"path"
	"strings"
	"unicode/utf8"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// MaxPathLen is Linux's PATH_MAX: anything longer cannot name a file.
const MaxPathLen = 4096

// ResolvePath turns a caller's path into a clean slash-separated path relative to the
// workspace ("." for the workspace itself). "/src/a.go", "src/a.go" and
// "/workspace/src/a.go" all give "src/a.go": callers often copy paths from inside the
// sandbox, so the workspace's prefix is taken to mean the workspace itself. A path that
// climbs above the workspace lexically is refused rather than clamped, since it says the
// caller is confused about where it is. Symlinks are not looked at here.
//
// The agent acts on this path and the control plane decides its file policy on it, so
// that what one decides and the other touches are the same lexical path.
func ResolvePath(p string) (string, error) {
	if err := CheckPath(p); err != nil {
		return "", err
	}
	trimmed := p
	if p == WorkspacePath || strings.HasPrefix(p, WorkspacePath+"/") {
		trimmed = p[len(WorkspacePath):]
	}
	rel := path.Clean("./" + strings.TrimLeft(trimmed, "/"))
	if rel == ".." || strings.HasPrefix(rel, "../") {
		return "", fmt.Errorf("path %q leaves the workspace: %w", p, errdefs.ErrInvalidArgument)
	}
	return rel, nil
}

// CheckPath refuses paths no file can have, before they reach a system call that would
// truncate them at a NUL or mangle them.
func CheckPath(p string) error {
	switch {
	case strings.IndexByte(p, 0) >= 0:
		return fmt.Errorf("path %q contains a NUL byte: %w", p, errdefs.ErrInvalidArgument)
	case !utf8.ValidString(p):
		return fmt.Errorf("path %q is not valid UTF-8: %w", p, errdefs.ErrInvalidArgument)
	case len(p) > MaxPathLen:
		return fmt.Errorf("path of %d bytes is longer than %d: %w", len(p), MaxPathLen, errdefs.ErrInvalidArgument)
	}
	return nil
}
