package microvm

import (
	"encoding/binary"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// The guest's owners and modes of a workspace shared with 9p's mapped-xattr model
// (Config.HostUID), as QEMU keeps them: little-endian 32-bit values in these attributes of
// each file; a file without them is shown with its host owner and mode.
const (
	xattrUID  = "user.virtfs.uid"
	xattrGID  = "user.virtfs.gid"
	xattrMode = "user.virtfs.mode"
)

// PrepareWorkspace readies a workspace of paddock's own for a QEMU that runs as
// hostUID:hostGID (Config.HostUID): every file becomes that id's on the host, and every
// file whose guest owner is not recorded yet gets one, as the guest saw it before: its
// owner when that was the sandbox user (the workspace root's owner: guestUID:guestGID, or
// an earlier range's id), root for root's, and its mode. Symbolic links only change hands.
func PrepareWorkspace(dir string, hostUID, hostGID, guestUID, guestGID uint32) error {
	var root syscall.Stat_t
	if err := syscall.Lstat(dir, &root); err != nil {
		return err
	}
	user := map[uint32]bool{root.Uid: true, guestUID: true, hostUID: true}
	group := map[uint32]bool{root.Gid: true, guestGID: true, hostGID: true}
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink == 0 && !hasXattr(p, xattrUID) {
			uid, gid := st.Uid, st.Gid
			if user[uid] {
				uid = guestUID
			}
			if group[gid] {
				gid = guestGID
			}
			for _, a := range []struct {
				name string
				v    uint32
			}{{xattrUID, uid}, {xattrGID, gid}, {xattrMode, st.Mode}} {
				if err := unix.Setxattr(p, a.name, binary.LittleEndian.AppendUint32(nil, a.v), 0); err != nil {
					return &os.PathError{Op: "setxattr", Path: p, Err: err}
				}
			}
		}
		if st.Uid == hostUID && st.Gid == hostGID {
			return nil
		}
		return os.Lchown(p, int(hostUID), int(hostGID))
	})
}

func hasXattr(p, name string) bool {
	_, err := unix.Getxattr(p, name, make([]byte, 4))
	return err == nil || !errors.Is(err, unix.ENODATA)
}
