// Package sandboxops is what can be done to a sandbox, whoever asks: exec, files, history,
// capability tokens, the app's status and the sandbox's policy. Each operation takes the
// caller, the sandbox's ID and a typed request, and owns the whole way down: the caller
// may reach the sandbox (the fleet's ownership), the policy in force allows it, the
// capability the request acts under allows it (and is reissued for the agent to check
// again), the audit event, the typed call to the agent (package agentclient) and which
// limit a command met. The HTTP API (package server) decodes, calls and encodes; the MCP
// server, the SDK service and the desktop call the same functions.
//
// Threat model: the caller is authenticated by the front door that calls (a session, an
// API token, a capability token held in the context by WithCapability). Everything a
// request asks is decided here before it reaches the sandbox's agent, which decides file
// paths and capabilities again where they really lead.
package sandboxops

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/fleet"
	"github.com/paddockhq/paddock/internal/store"
)

// Ops runs operations on the fleet's sandboxes. It is safe for concurrent use.
type Ops struct {
	fleet *fleet.Fleet
	st    *store.Store
	log   *slog.Logger
	pol   *Policies
	caps  *Capabilities
	// backups is where backups go; nil without a backup store.
	backups *Backups
	// followers counts the running sandboxes whose history events are followed.
	followers atomic.Int64
	// kept holds the kept terminal sessions (exec.go), by sandbox and session, each a
	// *keptSession.
	kept sync.Map
}

// Config is what Ops works with.
type Config struct {
	Fleet        *fleet.Fleet
	Store        *store.Store
	Log          *slog.Logger
	Policies     *Policies
	Capabilities *Capabilities
	Backups      *Backups // nil: no backup store
}

// New is the operations on cfg.Fleet's sandboxes.
func New(cfg Config) *Ops {
	return &Ops{fleet: cfg.Fleet, st: cfg.Store, log: cfg.Log, pol: cfg.Policies, caps: cfg.Capabilities, backups: cfg.Backups}
}

// Event records an event in the audit log, committed after the caller has answered
// (store.AuditLater): the operation it records has happened, and a file write through
// the API should not wait for an fsync of its record. A failure is logged, not returned.
func (o *Ops) Event(_ context.Context, userID, action string, detail map[string]any) {
	failed := func(err error) { o.log.Warn("record event", "action", action, "err", err) }
	if err := o.st.AuditLater(store.AuditEvent{At: time.Now(), ActorUserID: userID, Action: action, Detail: detail}, failed); err != nil {
		failed(err)
	}
}

func (o *Ops) event(ctx context.Context, userID, action string, detail map[string]any) {
	o.Event(ctx, userID, action, detail)
}

// APILimits are a recorded sandbox's limits as a response gives them: in bytes.
func APILimits(sb store.Sandbox) api.Limits {
	return api.Limits{MemoryBytes: sb.MemoryBytes, CPUs: sb.CPUs, Pids: sb.Pids, TmpBytes: sb.TmpBytes, FileSizeBytes: sb.FileSizeBytes, DiskBytes: sb.DiskBytes}
}
