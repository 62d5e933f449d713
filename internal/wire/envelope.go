package wire

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"path"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// EnvelopeVersion is the bootstrap envelope version this build writes and reads.
const EnvelopeVersion = 1

// MaxEnvelopeSize caps an envelope's JSON body. An envelope carries a command line, an
// environment and a few paths; a megabyte is generous and bounds what a corrupt length
// prefix can make the agent allocate.
const MaxEnvelopeSize = 1 << 20

// Envelope is what the runner hands paddock-agent when a sandbox starts: a 4-byte
// big-endian length followed by that many bytes of JSON (the Oxydra runner's framing).
// It travels on the agent's standard input (containers, process tier) or the first bytes of
// the control channel (microVMs).
type Envelope struct {
	// Version must equal EnvelopeVersion.
	Version int `json:"version"`
	// SandboxID names the sandbox; it is what the agent reports, not an identity anyone
	// trusts: the host knows the sandbox by the channel it speaks on.
	SandboxID string `json:"sandbox_id"`
	Tier      Tier   `json:"tier"`
	// Workspace is the workspace as the agent sees it (/workspace in a container).
	Workspace string `json:"workspace"`
	// ListenFD is the inherited file descriptor of the agent's listening socket.
	ListenFD int `json:"listen_fd"`
	// ListenAddr, in a pod (PodFlag), is the TCP address the agent listens on instead,
	// with mutual TLS (package podtls); ListenFD is 0 then.
	ListenAddr string `json:"listen_addr,omitempty"`
	// Env is the default environment of the sandbox's commands ("K=V").
	Env []string `json:"env,omitempty"`
	// Main is the sandbox's main command, started as session "main" before the agent
	// serves its first request, so its first output does not wait for a client.
	Main *Command `json:"main,omitempty"`
	// Process carries the process tier's confinement; nil in every other tier.
	Process *ProcessConfinement `json:"process,omitempty"`
	// RunAs is the unprivileged user the agent runs commands and file operations as, when
	// the agent itself runs as another (privileged) user: a command must not be able to
	// signal, ptrace, renice or prlimit the agent, and the kernel forbids that only across
	// users. Nil runs everything as the agent's own user (the process tier).
	RunAs *User `json:"run_as,omitempty"`
	// HistoryDir is where the agent keeps the workspace's history (package
	// agent/history), as the agent sees it: a directory only the agent's own user can
	// read or write, outside the workspace, so that the sandbox's commands cannot rewrite
	// their past. Empty means no history: the tiers where the agent shares its user with
	// the commands (process) or where the runner has no such directory to give (microvm).
	HistoryDir string `json:"history_dir,omitempty"`
	// HostPorts are ports of the sandbox's loopback where the host listens itself, in the
	// sandbox's network namespace (the container tier under runc): the agent does not
	// listen or relay there.
	HostPorts []uint32 `json:"host_ports,omitempty"`
	// CapabilityKeys is the agent's capability keyring (capability.Keyring.Export of the
	// keyring ForAgent derives for "sandbox:<id>"): with it the agent verifies the
	// Agent-audience tokens that file and exec requests carry. Empty: the agent refuses
	// every request that carries one. The keys sign only this sandbox's agent tokens.
	CapabilityKeys string `json:"capability_keys,omitempty"`
	// FileSizeLimit is RLIMIT_FSIZE in bytes for every process the agent starts (the
	// main command, sessions, execs), set before the command's first instruction; 0
	// leaves it unset. The agent does not take it on itself: it writes the workspace's
	// history. A write past it fails, and SIGXFSZ ends the process that made it.
	FileSizeLimit int64 `json:"file_size_limit,omitempty"`
	// CommandCgroups are inherited descriptors of the directories, by cgroup v1
	// controller (memory, pids, freezer), of the group the host made for the sandbox's
	// commands and gave the agent; on cgroup v2 (key "unified"), of the sandbox's own
	// group, which the agent splits into its own leaf and the commands' group, with the
	// limits CommandMemory and CommandPids (0: none of its own). Every command runs in a
	// group of its own below the commands', which ends with it. Empty: commands stay in
	// the agent's group.
	// Trampoline is the in-sandbox path of paddock-exec, which the agent starts limited
	// commands through; empty: the agent is its own trampoline.
	Trampoline string `json:"trampoline,omitempty"`
	// GatedRoot is the in-sandbox path of a view of its filesystem whose writable places
	// are noexec, with no /proc: an exec whose programs a capability token limits runs
	// chrooted there. Empty: such execs run in the sandbox's own root.
	GatedRoot      string         `json:"gated_root,omitempty"`
	CommandCgroups map[string]int `json:"command_cgroups,omitempty"`
	CommandMemory  int64          `json:"command_memory,omitempty"`
	CommandPids    int64          `json:"command_pids,omitempty"`
	// CommandNproc is RLIMIT_NPROC, soft and hard, of every command (0: the agent's own,
	// which commands inherit): the limit of a sandbox whose commands no cgroup of their
	// own can hold (runsc), where the user-space kernel counts it per user.
	CommandNproc int64 `json:"command_nproc,omitempty"`
}

// User is a numeric user and group.
type User struct {
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
}

// Command is a command line to run in the sandbox.
type Command struct {
	Argv []string `json:"argv"`
	// Env replaces the default environment when set.
	Env []string `json:"env,omitempty"`
	// Cwd defaults to the workspace.
	Cwd string `json:"cwd,omitempty"`
	// Restart, for the sandbox's app (the envelope's Main only): the agent restarts the
	// command whenever it exits, with exponential backoff (100 ms doubling to 30 s, reset
	// after it has run 10 s), and never exits itself whatever the app does.
	Restart bool `json:"restart,omitempty"`
	// HotReload, for the app: it reloads changed files itself, so a restore of the
	// workspace does not restart it.
	HotReload bool `json:"hot_reload,omitempty"`
}

// ProcessConfinement is what the process-tier agent applies to itself before it starts
// anything: there are no namespaces in that tier, so these host paths are the jail.
type ProcessConfinement struct {
	// TempDir is the sandbox's private temporary directory on the host (read-write).
	TempDir string `json:"temp_dir"`
	// ReadOnly lists host directories the sandbox may read and execute from.
	ReadOnly []string `json:"read_only"`
	// MaxFileSize is RLIMIT_FSIZE in bytes; 0 leaves it unset.
	MaxFileSize int64 `json:"max_file_size,omitempty"`
	// MaxOpenFiles is RLIMIT_NOFILE; 0 leaves it unset.
	MaxOpenFiles uint64 `json:"max_open_files,omitempty"`
}

// ValidSandboxID reports whether id can name a sandbox: lower-case letters, digits and
// dashes, not starting with a dash, at most 63 characters (it becomes a container ID, a
// cgroup name, a hostname). A loop, not a regexp: every process of paddock's would
// compile that regexp's 63 repetitions at its start.
func ValidSandboxID(id string) bool {
	if len(id) == 0 || len(id) > 63 || id[0] == '-' {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			return false
		}
	}
	return true
}

// Validate checks every field and names the first one that is wrong.
func (e *Envelope) Validate() error {
	switch {
	case e.Version != EnvelopeVersion:
		return invalid("version", "is %d, this agent reads version %d", e.Version, EnvelopeVersion)
	case !ValidSandboxID(e.SandboxID):
		return invalid("sandbox_id", "%q is not a sandbox ID (lower-case letters, digits, dashes; at most 63)", e.SandboxID)
	case !e.Tier.Valid():
		return invalid("tier", "%q is not a tier", e.Tier)
	case !strings.HasPrefix(e.Workspace, "/"):
		return invalid("workspace", "%q is not an absolute path", e.Workspace)
	case e.ListenAddr != "" && e.ListenFD != 0:
		return invalid("listen_addr", "is set with listen_fd %d: the agent listens on one or the other", e.ListenFD)
	case e.ListenAddr != "" && !validListenAddr(e.ListenAddr):
		return invalid("listen_addr", "%q is not a TCP address (like :7443)", e.ListenAddr)
	case e.ListenAddr == "" && e.ListenFD < 3:
		return invalid("listen_fd", "%d is not an inherited descriptor (want 3 or more)", e.ListenFD)
	case (e.Tier == TierProcess) != (e.Process != nil):
		return invalid("process", "must be set in the process tier and only there")
	case e.RunAs != nil && (e.RunAs.UID == 0 || e.RunAs.GID == 0):
		return invalid("run_as", "commands never run as root (uid and gid must not be 0)")
	case e.HistoryDir != "" && !strings.HasPrefix(e.HistoryDir, "/"):
		return invalid("history_dir", "%q is not an absolute path", e.HistoryDir)
	case e.HistoryDir != "" && within(e.HistoryDir, e.Workspace):
		return invalid("history_dir", "%q is inside the workspace, where the sandbox's commands could rewrite it", e.HistoryDir)
	case e.HistoryDir != "" && e.RunAs == nil:
		return invalid("history_dir", "needs run_as: without a user of their own, the commands could rewrite the history")
	case e.FileSizeLimit < 0:
		return invalid("file_size_limit", "is %d, must be 0 (no limit) or positive", e.FileSizeLimit)
	case e.GatedRoot != "" && !strings.HasPrefix(e.GatedRoot, "/"):
		return invalid("gated_root", "%q is not an absolute path", e.GatedRoot)
	case e.Trampoline != "" && !strings.HasPrefix(e.Trampoline, "/"):
		return invalid("trampoline", "%q is not an absolute path", e.Trampoline)
	case e.CommandMemory < 0 || e.CommandPids < 0:
		return invalid("command_memory", "%d and command_pids %d must be 0 (none) or positive", e.CommandMemory, e.CommandPids)
	case e.CommandNproc < 0:
		return invalid("command_nproc", "%d must be 0 (none) or positive", e.CommandNproc)
	}
	for c, fd := range e.CommandCgroups {
		if fd < 3 || fd == e.ListenFD || (c != "memory" && c != "pids" && c != "freezer" && c != "unified") {
			return invalid("command_cgroups", "%s: %d: want memory, pids, freezer or unified, each an inherited descriptor other than listen_fd", c, fd)
		}
	}
	if err := validEnv("env", e.Env); err != nil {
		return err
	}
	if e.Main != nil {
		if err := e.Main.Validate(); err != nil {
			return fmt.Errorf("main: %w", err)
		}
	}
	if err := validStrings("history_dir", e.HistoryDir); err != nil {
		return err
	}
	return validStrings("workspace", e.Workspace)
}

// validListenAddr reports whether a is host:port with a port number.
func validListenAddr(a string) bool {
	_, port, err := net.SplitHostPort(a)
	n, perr := strconv.Atoi(port)
	return err == nil && perr == nil && n > 0 && n < 65536
}

// within reports whether path p is dir or lies under it, lexically.
func within(p, dir string) bool {
	p, dir = path.Clean(p), path.Clean(dir)
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}

// Validate checks a command line and names the field that is wrong.
func (c *Command) Validate() error {
	if len(c.Argv) == 0 || c.Argv[0] == "" {
		return invalid("argv", "is empty")
	}
	if err := validStrings("argv", c.Argv...); err != nil {
		return err
	}
	if err := validStrings("cwd", c.Cwd); err != nil {
		return err
	}
	return validEnv("env", c.Env)
}

// validEnv checks "K=V" entries: a non-empty name without '=' and no NUL bytes anywhere.
func validEnv(field string, env []string) error {
	for i, kv := range env {
		if !ValidEnvEntry(kv) {
			return invalid(fmt.Sprintf("%s[%d]", field, i), "%q is not NAME=VALUE", kv)
		}
	}
	return validStrings(field, env...)
}

// ValidEnvEntry reports whether kv is NAME=VALUE with a non-empty name and no NUL byte.
func ValidEnvEntry(kv string) bool {
	k, _, ok := strings.Cut(kv, "=")
	return ok && k != "" && strings.IndexByte(kv, 0) < 0
}

// validStrings rejects NUL bytes (they would truncate at execve) and invalid UTF-8.
func validStrings(field string, ss ...string) error {
	for _, s := range ss {
		if strings.IndexByte(s, 0) >= 0 || !utf8.ValidString(s) {
			return invalid(field, "holds a NUL byte or invalid UTF-8")
		}
	}
	return nil
}

func invalid(field, format string, args ...any) error {
	return fmt.Errorf("envelope field %s: %s: %w", field, fmt.Sprintf(format, args...), errdefs.ErrInvalidArgument)
}

// WriteEnvelope validates e and writes it framed to w.
func WriteEnvelope(w io.Writer, e *Envelope) error {
	if err := e.Validate(); err != nil {
		return err
	}
	body, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("encode envelope: %w", err)
	}
	if len(body) > MaxEnvelopeSize {
		return fmt.Errorf("envelope is %d bytes, over the %d-byte cap: %w", len(body), MaxEnvelopeSize, errdefs.ErrLimitExceeded)
	}
	frame := make([]byte, 4, 4+len(body))
	binary.BigEndian.PutUint32(frame, uint32(len(body)))
	_, err = w.Write(append(frame, body...))
	return err
}

// ReadEnvelope reads one framed envelope from r, rejecting oversized frames before reading
// their body, unknown fields, trailing bytes and invalid values.
func ReadEnvelope(r io.Reader) (*Envelope, error) {
	var prefix [4]byte
	if _, err := io.ReadFull(r, prefix[:]); err != nil {
		return nil, fmt.Errorf("read envelope length: %w", err)
	}
	n := binary.BigEndian.Uint32(prefix[:])
	if n > MaxEnvelopeSize {
		return nil, fmt.Errorf("envelope length %d is over the %d-byte cap: %w", n, MaxEnvelopeSize, errdefs.ErrInvalidArgument)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return nil, fmt.Errorf("read envelope body (%d bytes): %w", n, err)
	}
	return DecodeEnvelope(body)
}

// DecodeEnvelope parses and validates an envelope's JSON body.
func DecodeEnvelope(body []byte) (*Envelope, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	var e Envelope
	if err := dec.Decode(&e); err != nil {
		return nil, fmt.Errorf("decode envelope: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	if dec.More() {
		return nil, fmt.Errorf("decode envelope: trailing data after the JSON object: %w", errdefs.ErrInvalidArgument)
	}
	if err := e.Validate(); err != nil {
		return nil, err
	}
	return &e, nil
}
