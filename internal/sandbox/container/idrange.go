package container

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Every runc sandbox with a user namespace gets a range of 65536 host ids of its own, so
// that no two sandboxes share a host uid: not their agents (the namespace's root), not
// their commands. A process that broke out of one sandbox would hold, on the host, ids that
// own nothing but that sandbox's own history store, and that no process of another sandbox
// runs as. Docker's userns-remap, by contrast, gives every container the same range.
//
// The ranges start at 2^31 (above any real user; AgentHostID is the first range's root) and
// are idRangeSize apart; the last whole range before (uid_t)-1, which is no id, is left out.
const (
	idRangeSize = 1 << 16
	idRangeBase = AgentHostID
	idRanges    = (1<<32-idRangeBase)/idRangeSize - 1
)

// idRangeClaims is the directory of the host's claims on id ranges: one file per range in
// use, named by its number and holding the directory of the sandbox that holds it. It is
// host-wide, not per state directory, so that two runners on one host (tests do that)
// never hand out one range twice. Under /run: a reboot, which ends every sandbox, frees
// every range.
var idRangeClaims = "/run/paddock-idranges"

// idRangeFile is the file in a sandbox's directory that says which range it holds, so that
// Destroy, in this process or after an adoption, gives back the right one.
const idRangeFile = "idrange"

// IsAgentHostID reports whether id is the first id of a sandbox range: an agent's, as the
// host sees it, under a user namespace.
func IsAgentHostID(id uint32) bool {
	return id >= idRangeBase && (id-idRangeBase)%idRangeSize == 0 && int((id-idRangeBase)/idRangeSize) < idRanges
}

// rangeOf is the first id of the sandbox range id is in, or 0 for an id of no range.
func rangeOf(id uint32) uint32 {
	if id < idRangeBase {
		return 0
	}
	base := id - (id-idRangeBase)%idRangeSize
	if !IsAgentHostID(base) {
		return 0
	}
	return base
}

// IsRangeID reports whether id is in a sandbox range: an id no host account has.
func IsRangeID(id uint32) bool { return rangeOf(id) != 0 }

// rangeBase is the first host id of range n.
func rangeBase(n int) uint32 { return idRangeBase + uint32(n)*idRangeSize }

// claimIDRange claims a free range for the sandbox whose directory is dir and records it
// there: the one starting at prefer when that is a range's first id and free, else any.
// Range 0 is never claimed: before ranges were per sandbox every sandbox's agent was its
// first id (AgentHostID), and sandboxes of that time may still run, adopted by a newer
// control plane. Ranges are tried from a random one on, so that concurrent claims rarely
// meet; a claim whose sandbox directory is gone (a crash between a sandbox's end and its
// release) is taken over.
func claimIDRange(dir string, prefer uint32) (uint32, error) {
	if err := os.MkdirAll(idRangeClaims, 0o700); err != nil {
		return 0, fmt.Errorf("id ranges: %w", err)
	}
	start := rand.IntN(idRanges - 1)
	if IsAgentHostID(prefer) && prefer != idRangeBase {
		start = int((prefer-idRangeBase)/idRangeSize) - 1
	}
	for i := range idRanges - 1 {
		n := 1 + (start+i)%(idRanges-1)
		claim := filepath.Join(idRangeClaims, strconv.Itoa(n))
		ok, err := createClaim(claim, dir)
		if err == nil && !ok {
			ok, err = takeOver(claim, dir)
		}
		if err != nil {
			return 0, fmt.Errorf("id ranges: %w", err)
		}
		if !ok {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, idRangeFile), []byte(strconv.Itoa(n)), 0o600); err != nil {
			os.Remove(claim)
			return 0, fmt.Errorf("id ranges: %w", err)
		}
		return rangeBase(n), nil
	}
	return 0, fmt.Errorf("all %d host id ranges are in use (%s)", idRanges-1, idRangeClaims)
}

// createClaim creates claim for dir; false when another holds it.
func createClaim(claim, dir string) (bool, error) {
	f, err := os.OpenFile(claim, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	_, err = f.WriteString(dir)
	if err = errors.Join(err, f.Close()); err != nil {
		os.Remove(claim)
		return false, err
	}
	return true, nil
}

// takeOver claims claim for dir if the sandbox directory it names is gone. Takers hold
// the claims directory's lock from reading the holder to writing theirs, so that two
// never both take one claim; a plain claim (createClaim) needs no lock, since O_EXCL lets
// only one make the file. A claim still being written (empty) is not stale.
func takeOver(claim, dir string) (bool, error) {
	d, err := os.Open(idRangeClaims)
	if err != nil {
		return false, err
	}
	defer d.Close()
	if err := syscall.Flock(int(d.Fd()), syscall.LOCK_EX); err != nil {
		return false, err
	}
	holder, err := os.ReadFile(claim)
	if err != nil || len(holder) == 0 {
		return false, nil
	}
	if _, err := os.Stat(string(holder)); !errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err := os.Remove(claim); err != nil {
		return false, nil
	}
	return createClaim(claim, dir)
}

// ClaimIDRange claims a range of host ids for a sandbox of another tier whose directory is
// dir (the microvm tier runs QEMU as one of them), as a runc sandbox's start does,
// preferring the range prefer is in. It returns the range's first id and the function
// that gives it back (if the claim is still dir's).
func ClaimIDRange(dir string, prefer uint32) (uint32, func(), error) {
	base, err := claimIDRange(dir, rangeOf(prefer))
	if err != nil {
		return 0, nil, err
	}
	claim := filepath.Join(idRangeClaims, strconv.Itoa(int((base-idRangeBase)/idRangeSize)))
	return base, func() {
		if holder, err := os.ReadFile(claim); err == nil && string(holder) == dir {
			os.Remove(claim)
		}
	}, nil
}

// SandboxHostID is the host id of a sandbox's id in the range that begins at base.
func SandboxHostID(base, id uint32) uint32 { return sandboxHostID(base, id) }

// releaseIDRange gives back the range the sandbox whose directory is dir holds, if the
// claim is still its own. Errors are ignored: a claim left behind is taken over once the
// directory is gone.
func releaseIDRange(dir string) {
	n, ok := heldRange(dir)
	if !ok {
		return
	}
	claim := filepath.Join(idRangeClaims, strconv.Itoa(n))
	if holder, err := os.ReadFile(claim); err == nil && string(holder) == dir {
		os.Remove(claim)
	}
}

// ownerOf is the uid that owns path, or 0 when there is none to read.
func ownerOf(path string) uint32 {
	var st syscall.Stat_t
	if path == "" || syscall.Lstat(path, &st) != nil {
		return 0
	}
	return st.Uid
}

// heldIDRange is the first id of the range the sandbox whose directory is dir holds, or 0
// for none (started without a user namespace, or before ranges were per sandbox).
func heldIDRange(dir string) uint32 {
	n, ok := heldRange(dir)
	if !ok {
		return 0
	}
	return rangeBase(n)
}

// heldRange is the number of the range dir's idRangeFile records.
func heldRange(dir string) (int, bool) {
	b, err := os.ReadFile(filepath.Join(dir, idRangeFile))
	if err != nil {
		return 0, false
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return n, err == nil && n > 0 && n < idRanges
}

// sandboxHostID is the host id a container id of a sandbox with a user namespace maps to
// (idMappings): ids below 65535 keep their offset in the range; any other, which only the
// sandbox user can have, is the range's last id.
func sandboxHostID(base, id uint32) uint32 {
	if id < idRangeSize-1 {
		return base + id
	}
	return base + idRangeSize - 1
}
