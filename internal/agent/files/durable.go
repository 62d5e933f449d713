package files

import (
	"path/filepath"
	"strings"

	"github.com/moby/sys/mountinfo"
)

// Durability of a Write. A file is written to a temp name and renamed over the old one, so
// that readers see the old file or the new, never a part. Across a power cut that needs the
// new data on disk before the rename is: generally, a sync of the temp file before the
// rename. ext4 gives it by itself in its default mode (data=ordered, auto_da_alloc): a
// rename over an existing file forces that file's data out before the rename commits
// (Documentation/admin-guide/ext4.rst, auto_da_alloc). There Write renames first and syncs
// after, before it answers: the reader sees the edit a sync sooner (a dev server's HMR, the
// preview), and an answered write is as durable as before.

// renameFirstOn reports whether the workspace at dir lies on a file system where a rename
// over an existing file may come before the sync, as above. Unknown is no.
func renameFirstOn(dir string) bool {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return false
	}
	mounts, err := mountinfo.GetMounts(mountinfo.ParentsFilter(abs))
	if err != nil {
		return false
	}
	var at *mountinfo.Info
	for _, m := range mounts {
		if at == nil || len(m.Mountpoint) > len(at.Mountpoint) {
			at = m
		}
	}
	return at != nil && replaceIsOrdered(at.FSType, at.VFSOptions)
}

// replaceIsOrdered reports whether a file system of type fstype, mounted with the super
// options opts (mountinfo's last field), orders a renamed-over file's data before the
// rename: ext4, unless auto_da_alloc is off or data is not ordered (writeback).
func replaceIsOrdered(fstype, opts string) bool {
	if fstype != "ext4" {
		return false
	}
	for o := range strings.SplitSeq(opts, ",") {
		if o == "noauto_da_alloc" || o == "data=writeback" {
			return false
		}
	}
	return true
}
