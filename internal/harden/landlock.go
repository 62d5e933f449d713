//go:build linux

package harden

import (
	"errors"
	"fmt"
	"os"

	"github.com/landlock-lsm/go-landlock/landlock"
	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// landlockABIs holds go-landlock's full configuration for each ABI, V1 first: each restricts
// everything its ABI can.
var landlockABIs = []landlock.Config{
	landlock.V1, landlock.V2, landlock.V3, landlock.V4, landlock.V5, landlock.V6,
	landlock.V7, landlock.V8, landlock.V9, landlock.V10, landlock.V11,
}

// Landlock ABI versions that add what this package uses.
const (
	abiRefer = 2 // rename and link between directories
	abiNet   = 4 // TCP bind and connect
	abiScope = 6 // signals and abstract UNIX sockets
	abiUDP   = 10
)

// landlockABI returns the Landlock ABI this kernel offers, as go-landlock will enforce it (its
// own detection is internal): 0 without Landlock, 6 and up lowered to 5 when the kernel lacks
// the signal-scoping fix (erratum 2), capped at the highest ABI go-landlock knows.
func landlockABI() int {
	v, err := llsys.LandlockGetABIVersion()
	if err != nil || v < 0 {
		return 0
	}
	if v >= abiScope {
		if errata, err := llsys.LandlockGetErrata(); err != nil || errata&0x2 == 0 {
			v = abiScope - 1
		}
	}
	return min(v, len(landlockABIs))
}

// restrictLandlock enforces the Landlock ruleset and checks each part of it (filesystem,
// network, scopes) by attempting an access it must now deny.
func restrictLandlock(cfg Config) []outcome {
	abi := landlockABI()
	if abi == 0 {
		return []outcome{landlockMissing(cfg.RequireLandlock)}
	}
	paths, err := sortPaths(cfg)
	if err != nil {
		return []outcome{stepFailed("landlock", err)}
	}
	llcfg := landlockABIs[abi-1]
	if !cfg.RequireLandlock {
		llcfg = llcfg.BestEffort()
	}

	// The probe listener must exist before the domain does, so that it lies outside it.
	var scope *abstractListener
	if abi >= abiScope {
		if scope, err = listenAbstract(); err != nil {
			return []outcome{stepFailed("landlock", fmt.Errorf("preparing the scope check: %w", err))}
		}
		defer scope.close()
	}
	if err := llcfg.Restrict(paths.rules(abi, cfg.AllowConnectTCP)...); err != nil {
		return []outcome{stepFailed("landlock", fmt.Errorf("restrict (ABI %d): %w", abi, err))}
	}
	return []outcome{checkFS(abi, paths), checkNet(abi, cfg.AllowConnectTCP), checkScope(abi, scope)}
}

func landlockMissing(required bool) outcome {
	if required {
		return stepFailed("landlock", fmt.Errorf("kernel has no Landlock and RequireLandlock is set: %w", errdefs.ErrUnavailable))
	}
	return stepUnsupported("landlock", "kernel has no Landlock: filesystem, network and scope rules not applied")
}

// landlockPaths sorts the configured paths by the rule they need.
type landlockPaths struct {
	roDirs, roFiles, rwDirs, rwFiles, skipped []string
}

// sortPaths splits ReadOnly into directories and files (directory rights on a file are an
// error in Landlock) and drops the ReadOnly and ReadWriteFiles entries that do not exist.
func sortPaths(cfg Config) (landlockPaths, error) {
	p := landlockPaths{rwDirs: append([]string{cfg.Workspace}, nonEmpty(cfg.TempDir)...)}
	for _, path := range cfg.ReadOnly {
		fi, err := os.Stat(path)
		switch {
		case errors.Is(err, os.ErrNotExist):
			p.skipped = append(p.skipped, path)
		case err != nil:
			return p, err
		case fi.IsDir():
			p.roDirs = append(p.roDirs, path)
		default:
			p.roFiles = append(p.roFiles, path)
		}
	}
	for _, path := range cfg.ReadWriteFiles {
		_, err := os.Stat(path)
		switch {
		case errors.Is(err, os.ErrNotExist):
			p.skipped = append(p.skipped, path)
		case err != nil:
			return p, err
		default:
			p.rwFiles = append(p.rwFiles, path)
		}
	}
	return p, nil
}

func (p landlockPaths) rules(abi int, connectTCP []uint16) []landlock.Rule {
	rw := landlock.RWDirs(p.rwDirs...)
	if abi >= abiRefer {
		// Without "refer", renaming a file into another directory of the workspace fails
		// with EXDEV, which breaks git among others. On ABI 1 asking for it would make
		// best-effort mode drop Landlock altogether.
		rw = rw.WithRefer()
	}
	rules := []landlock.Rule{
		landlock.RODirs(p.roDirs...),
		landlock.ROFiles(p.roFiles...),
		rw,
		// Terminals need ioctls beyond Landlock's always-allowed few.
		landlock.RWFiles(p.rwFiles...).WithIoctlDev(),
	}
	if abi >= abiNet {
		for _, port := range connectTCP {
			rules = append(rules, landlock.ConnectTCP(port))
		}
	}
	return rules
}

func checkFS(abi int, p landlockPaths) outcome {
	const step = "landlock_fs"
	fd, err := unix.Open("/", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err == nil {
		unix.Close(fd)
	}
	if err := wantDenied(`listing "/"`, unix.EACCES, err); err != nil {
		return stepFailed(step, err)
	}
	return stepOK(step, fmt.Sprintf("abi=%d read-only=%v %v read-write=%v files=%v skipped=%v",
		abi, p.roDirs, p.roFiles, p.rwDirs, p.rwFiles, p.skipped))
}

func checkNet(abi int, connectTCP []uint16) outcome {
	const step = "landlock_net"
	if abi < abiNet {
		return stepUnsupported(step, fmt.Sprintf("abi=%d < %d: TCP and UDP unrestricted", abi, abiNet))
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return stepFailed(step, fmt.Errorf("check socket: %w", err))
	}
	defer unix.Close(fd)
	err = unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}})
	if err := wantDenied("tcp bind to 127.0.0.1:0", unix.EACCES, err); err != nil {
		return stepFailed(step, err)
	}
	udp := "udp denied"
	if abi < abiUDP {
		udp = fmt.Sprintf("udp unrestricted (abi < %d)", abiUDP)
	}
	return stepOK(step, fmt.Sprintf("abi=%d tcp bind denied, tcp connect allowed to ports %v only, %s", abi, connectTCP, udp))
}

func checkScope(abi int, l *abstractListener) outcome {
	const step = "landlock_scope"
	if abi < abiScope {
		return stepUnsupported(step, fmt.Sprintf("abi=%d < %d: signals and abstract sockets reach processes outside the sandbox", abi, abiScope))
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return stepFailed(step, fmt.Errorf("check socket: %w", err))
	}
	defer unix.Close(fd)
	err = unix.Connect(fd, l.addr)
	if err := wantDenied("connecting to an abstract socket outside the domain", unix.EPERM, err); err != nil {
		return stepFailed(step, err)
	}
	return stepOK(step, fmt.Sprintf("abi=%d signals and abstract unix sockets confined to the sandbox", abi))
}

// abstractListener is an abstract UNIX socket created before Landlock is enforced, so that
// connecting to it afterwards must be denied by the abstract-socket scope.
type abstractListener struct {
	fd   int
	addr unix.Sockaddr
}

func listenAbstract() (*abstractListener, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	l := &abstractListener{fd: fd}
	// An empty address autobinds: the kernel picks a fresh abstract name, so nothing else
	// on the host can collide with or impersonate it.
	if err = unix.Bind(fd, &unix.SockaddrUnix{}); err == nil {
		if err = unix.Listen(fd, 1); err == nil {
			l.addr, err = unix.Getsockname(fd)
		}
	}
	if err != nil {
		l.close()
		return nil, err
	}
	return l, nil
}

func (l *abstractListener) close() { unix.Close(l.fd) }

// wantDenied turns the result of an access that must be denied into an error: nil when it
// failed with want, a description of the gap otherwise.
func wantDenied(what string, want unix.Errno, err error) error {
	switch {
	case err == nil:
		return fmt.Errorf("%s was allowed: the rule is not in effect", what)
	case errors.Is(err, want):
		return nil
	default:
		return fmt.Errorf("%s failed with %v, want %v: cannot tell whether the rule is in effect", what, err, want)
	}
}
