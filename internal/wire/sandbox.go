package wire

import (
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strconv"
)

// Paths inside a container sandbox, where the runner binds what the agent needs.
const (
	WorkspacePath = "/workspace"
	// AgentDir holds the agent, its trampoline and its private state.
	AgentDir  = "/.paddock"
	AgentPath = AgentDir + "/paddock-agent"
	// TrampolinePath is where paddock-exec is bound, when the host has it beside the agent.
	TrampolinePath = AgentDir + "/paddock-exec"
	// HistoryPath is where the workspace's history store is bound: outside /workspace, in
	// a directory 0700 and the container's root's, so that only the agent reaches it and
	// the sandbox user's commands cannot read or rewrite their past.
	HistoryPath = AgentDir + "/history"
	// GatedRootPath is the gated root: the view of the sandbox's filesystem, with noexec
	// writable places and no /proc, in which an exec that a capability token limits runs.
	GatedRootPath = AgentDir + "/gated"
	// SharedPath is where the user's shared directory is bound: HOME and the dependency
	// caches, on a disk of the user's own that all their sandboxes share.
	SharedPath = "/shared"
)

// Flags on paddock-agent's command line.
const (
	// VMInitFlag (the guest kernel passes what follows "--" on its command line to init)
	// says that the agent is PID 1 of a microVM: it sets up the guest itself, then reads
	// its envelope from the virtio-serial port and serves on that port.
	VMInitFlag = "--vm-init"
	// ConnectedFlag says that the envelope's listen_fd is one connected socket whose other
	// end the host holds, not a listening socket: gVisor (runsc) can pass a host socket
	// into the sandbox only connected.
	ConnectedFlag = "--connected"
	// PodFlag, followed by a directory, starts the agent in a pod on a cluster: it reads
	// its envelope from the directory's EnvelopeFile and its TLS pair from the files
	// package podtls names, and listens on the envelope's listen_addr.
	PodFlag = "--pod"
	// PodWarmFlag, followed by a directory, starts the agent in a warm pool's pod: it
	// has no sandbox yet and serves only the claim handshake (package agent's
	// BootstrapWarmPod), reading the CA and its pod's token from the directory.
	PodWarmFlag = "--pod-warm"
	// PodTokenFile is the warm pod's service account token in that directory, bound to
	// the pod and meant for paddock alone (audience PodTokenAudience).
	PodTokenFile = "token"
	// PodTokenAudience is the audience of that token.
	PodTokenAudience = "paddock.dev/warm-claim"
	// EnvelopeFile is the envelope's file in the pod's directory: the same framing as on
	// stdin.
	EnvelopeFile = "envelope"
	// PodDir is where a pod mounts its Secret (the envelope and the TLS pair).
	PodDir = "/run/paddock"
	// PodAgentPort is the agent's port in a pod.
	PodAgentPort = 7443
)

// VM layout shared by the agent and the host (package sandbox/microvm), which builds the
// initramfs and the QEMU command line.
const (
	// VMPortName is the virtio-serial port of the agent's channel.
	VMPortName = "paddock.agent"
	// VMHello is what the agent writes on the port once it has opened it. The host sends
	// the envelope only after reading it: virtio_console drops what arrives on a port that
	// the guest has not opened yet.
	VMHello = "paddock-agent ready\n"
	// VMModulesDir holds the kernel modules of the initramfs, loaded in the order the file
	// VMModulesDir/order lists them.
	VMModulesDir = "/modules"
	// VMWorkspace is where the workspace share is mounted in the guest.
	VMWorkspace = "/workspace"
	// VMUsrTag and VMWorkspaceTag are the 9p mount tags of the two shares.
	VMUsrTag       = "usr"
	VMWorkspaceTag = "workspace"
	// VMPidsEnv carries the sandbox's pids limit on the kernel command line (the kernel
	// hands init the parameters it does not know as environment variables).
	VMPidsEnv = "PADDOCK_PIDS"
	// VMTmpEnv carries the size of the guest's /tmp in bytes the same way (empty: the
	// kernel's default, half the guest's RAM).
	VMTmpEnv = "PADDOCK_TMP"
)

// SandboxIDEnv is the variable that tells every command in the sandbox its sandbox's ID
// (an app can name itself with it, as the welcome app does).
const SandboxIDEnv = "PADDOCK_SANDBOX_ID"

// AppBuildEnv is the variable that tells the sandbox's app its build (the app record's
// build: whatever the sandbox's creator wants to tell apart, a commit, an image tag); the
// welcome app reports it as "build".
const AppBuildEnv = "PADDOCK_APP_BUILD"

// ServicesEnv is the variable in the sandbox's environment that holds the base URL of the
// host's services (the secrets broker, the provider gateway): an http URL on the sandbox's
// own loopback. The agent listens there and relays each connection to the host over its
// channel (Net.Accept), so that the host knows which sandbox is asking from the channel a
// request arrives on, and the sandbox needs no route to the host at all.
const ServicesEnv = "PADDOCK_SERVICES_URL"

// TierEnv is the variable in a sandbox's environment that names its tier, which the
// sandbox's own settings cannot override: the coding agent's browser tool is off in the
// process tier.
const TierEnv = "PADDOCK_TIER"

// EgressEnv is the same for the host's egress proxy, when the sandbox's network policy
// allows some hosts: HTTP_PROXY and HTTPS_PROXY point there.
const EgressEnv = "PADDOCK_EGRESS_URL"

// ServicesAddr is the host:port of a services URL, which must be plain http on a loopback
// IP literal: anything else would have the agent listen where others than the sandbox's
// own processes could connect.
func ServicesAddr(name, raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "http" || u.Port() == "" {
		return "", fmt.Errorf("%s=%q: want http://127.0.0.1:PORT", name, raw)
	}
	if ip := net.ParseIP(u.Hostname()); ip == nil || !ip.IsLoopback() {
		return "", fmt.Errorf("%s=%q: the host must be a loopback address", name, raw)
	}
	return u.Host, nil
}

// MainSessionID names the session of the sandbox's main command.
const MainSessionID = "main"

// ProcessTierReason is why sessions are unavailable in the process tier.
const ProcessTierReason = "the process tier (--insecure) runs only the sandbox's main command; shell and exec sessions need the container or microvm tier"

// ThreadReserve is how many OS threads the agent creates up front, and how many the
// runner adds to a sandbox's pids limit for them.
const ThreadReserve = 24

// HistoryBudget bounds a sandbox's history store (the runner counts it in its disk
// reserve): past it, the agent compacts the oldest checkpoints. A constant for now: enough
// for hundreds of checkpoints of a typical project, small next to the disk a host gives
// its sandboxes.
const HistoryBudget = 1 << 30

// WelcomeSubcommand is the paddock-agent subcommand that runs the welcome app.
const WelcomeSubcommand = "welcome"

// WelcomeCommand is the argv that runs the welcome app from the agent binary at agentPath
// (inside the sandbox), listening on port of the sandbox's loopback.
func WelcomeCommand(agentPath string, port int) []string {
	return []string{agentPath, WelcomeSubcommand, "--listen", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
}

// CodeSubcommand is the paddock-agent subcommand that runs a turn of the coding agent.
const CodeSubcommand = "code"

// Paths of the host's services that the coding agent calls for its sandbox: a checkpoint
// of the workspace, undo, the app's state and its restart. The host knows the sandbox from the channel
// a request arrives on, never from the request.
const (
	ServicesCheckpointPath = "/sandbox/v1/checkpoint"
	ServicesUndoPath       = "/sandbox/v1/undo"
	ServicesAppPath        = "/sandbox/v1/app"
	ServicesAppRestartPath = "/sandbox/v1/app/restart"
)

// Paths of the host's services that open and commit the transaction that makes one turn
// of the coding agent one checkpoint, roll back a turn the agent did not finish, and
// list the history (to find that turn's transaction still open).
const (
	ServicesBeginPath    = "/sandbox/v1/transaction/begin"
	ServicesCommitPath   = "/sandbox/v1/transaction/commit"
	ServicesRollbackPath = "/sandbox/v1/transaction/rollback"
	ServicesHistoryPath  = "/sandbox/v1/history"
	// ServicesAgentStatePath + NAME keeps a file of the coding agent's conversation on
	// the host (GET, PUT), so that it outlives the sandbox's restart.
	ServicesAgentStatePath = "/sandbox/v1/agent/state/"
)

// DesktopPort is the port of the sandbox's loopback where the agent serves the desktop's
// page and assets (desktop-<sandbox ID> under the apps domain, through the host). The agent
// binds it before it starts the app, so the app cannot take it; an app that asks for it
// is refused at creation.
const DesktopPort = 4751

// ForkHistorySubcommand is the paddock-agent subcommand the host runs, as a process of its
// own, to fork a sandbox's history store: the control plane links none of the store's code.
// Its flags: --src, --dst, --at, --workspace, --uid, --gid; with --check it only finds the
// checkpoint. It prints one ForkInfo as JSON. With --export it writes the store at --src
// as a history export (the format `paddock history export` writes) to its stdout instead.
const ForkHistorySubcommand = "fork-history"

// ForkInfo is what fork-history did, or why it could not: Code is a gRPC code (0: done)
// and Message its error, which errdefs.FromGRPC turns back into the taxonomy.
type ForkInfo struct {
	Code    uint32 `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
	// At is the checkpoint the fork starts from, and Tree the hash of its files.
	At   string `json:"at,omitempty"`
	Tree string `json:"tree,omitempty"`
	// OpenTx and OpenTxMessage name the transaction the source had open, which the fork
	// leaves out (it starts from the state before it).
	OpenTx        string `json:"open_tx,omitempty"`
	OpenTxMessage string `json:"open_tx_message,omitempty"`
	// Linked and Cloned count the blobs shared by hard link and by reflink.
	Linked int `json:"linked,omitempty"`
	Cloned int `json:"cloned,omitempty"`
	// Trusted counts the source's stat cache entries a fork over a copy of its disk image
	// kept (history.ForkOverCopy): files it need not read again.
	Trusted int `json:"trusted,omitempty"`
	// Proven: the source, frozen for the copy, was proven to be the checkpoint
	// (history.ProveFrozen), so the fork recorded the restore without walking the copy.
	Proven bool `json:"proven,omitempty"`
	// NotProven says what the proof found otherwise.
	NotProven string `json:"not_proven,omitempty"`
}

// The warm pod's claim handshake (over podtls.WarmServerConfig's TLS, HTTP/1.1): the
// control plane GETs WarmIdentityPath (the pod's token, PodTokenFile), then POSTs a
// WarmClaim to WarmClaimPath, once.
const (
	WarmIdentityPath = "/v1/warm/identity"
	WarmClaimPath    = "/v1/warm/claim"
)

// WarmClaim makes a warm pod the sandbox it names: its envelope (as EnvelopeFile holds
// it), and the key and certificate the CA issued that sandbox, with the CA's certificate.
type WarmClaim struct {
	Envelope []byte `json:"envelope"`
	Cert     []byte `json:"cert"`
	Key      []byte `json:"key"`
	CA       []byte `json:"ca"`
}

// AgentProvidersEnv is the variable that lists the gateway's providers for the coding
// agent, as NAME=KIND pairs separated by commas: `paddock-agent code --provider NAME`
// reaches NAME at ServicesEnv's /gateway/NAME, with the API its KIND speaks.
const AgentProvidersEnv = "PADDOCK_AGENT_PROVIDERS"

// AgentModelEnv and AgentProviderEnv are the coding agent's model and provider (by name)
// when its run gives no --model or --provider: the server's default model is in the
// sandbox's environment, and the control plane adds the caller's own choice to the
// environment of each run it starts.
const (
	AgentModelEnv    = "PADDOCK_AGENT_MODEL"
	AgentProviderEnv = "PADDOCK_AGENT_PROVIDER"
)

// MaxAgentModel is the longest model name the coding agent accepts.
const MaxAgentModel = 200

var agentModel = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:/@+-]*$`)

// CheckAgentModel checks a model name for the coding agent: at most MaxAgentModel
// characters, a letter or digit first, then letters, digits and . _ : / @ + -. That is
// every provider's naming ("claude-sonnet-4-5", "llama3.1:8b", "openai/gpt-4o") and keeps
// white space and control characters out of the JSON, logs and argv it travels in.
func CheckAgentModel(model string) error {
	if len(model) > MaxAgentModel || !agentModel.MatchString(model) {
		return fmt.Errorf("model %q: want 1-%d letters, digits, '.', '_', ':', '/', '@', '+' or '-', starting with a letter or digit", clip(model, 64), MaxAgentModel)
	}
	return nil
}

// clip shortens s for an error message.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
