package sandboxops

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/fleet"
	"github.com/paddockhq/paddock/internal/policy"
	"github.com/paddockhq/paddock/internal/store"
	"github.com/paddockhq/paddock/internal/wire"
	pb "github.com/paddockhq/paddock/internal/wire/agentv1"
)

// Policies in force (package policy) where the action happens: the control plane decides
// every exec and every file operation of the API before it reaches the sandbox's agent,
// and a denied one never does.
//
// Which policy: the sandbox's own (PUT /api/v1/sandboxes/{id}/policy, stored in the
// database), else its owner's (the file <users_dir>/policies/<user>.yaml, read again when it
// changes), else the server's default (config key policy: FILE, loaded at start), else
// none, and everything is allowed. The first that exists is the whole policy: policies
// are not merged, so what a sandbox's policy allows is exactly what it says. A user
// policy file that does not load keeps its last good version in force; one that never
// loaded refuses every action until it is fixed (fail closed), as does a stored policy a
// newer paddock no longer loads.
//
// Threat model: the caller is an authenticated user, or an AI agent holding their token;
// the policy is the operator's or the user's own limit on what that caller does to the
// sandbox through the API. Decisions are on the parsed command and the lexical path (see
// package policy for what that cannot see); the sandbox's isolation is what holds when a
// decision is wrong. Code already running in the sandbox is not governed by these rules.

// userPolicyDir is where per-user policy files live under users_dir: a directory of its
// own, because <users_dir>/<user>.yaml is the runner's per-user configuration and user
// names may contain dots.
const userPolicyDir = "policies"

// maxCompiled bounds the cache of loaded policies; past it the cache starts over.
const maxCompiled = 256

// InForce is the policy that governs one sandbox, and where it comes from.
type InForce struct {
	pol    *policy.Policy // nil when there is none
	source string         // an api.Policy* constant
	text   string
	at     time.Time // when a sandbox's own policy was attached
}

// denied is the error of an action the policy refused: a 403 whose message names the
// rule and says why.
func (in InForce) denied(d policy.Decision) error {
	whose := map[string]string{api.PolicySandbox: "the sandbox's policy", api.PolicyUser: "the owner's policy", api.PolicyDefault: "the server's default policy"}[in.source]
	return fmt.Errorf("denied by %s, rule %s: %s: %w", whose, d.Rule, d.Reason, errdefs.ErrPermissionDenied)
}

// fileRules is the policy's text for the agent to apply to the path a file request
// really reaches (agentv1's policy fields), or "" when it has no file rules: the control
// plane decides on the path as named, which a symlink in the workspace can lead
// elsewhere; the agent decides again on where it leads.
func (in InForce) fileRules() string {
	if in.pol == nil || in.pol.Jail() == "" {
		return ""
	}
	return in.text
}

// gate is what the agent is told of a policy that limits an exec's programs, so that it
// holds the exec's environment to the same allowlist; nil without shell rules.
func (in InForce) gate() *pb.ExecGate {
	if in.pol == nil || !in.pol.HasShellRules() {
		return nil
	}
	return &pb.ExecGate{Env: in.pol.EnvNames()}
}

// timeout is the policy's wall-clock limit on one command (0: none).
func (in InForce) timeout() time.Duration {
	if in.pol == nil {
		return 0
	}
	return in.pol.Resources().Timeout
}

// exec decides a one-shot exec: its argv, the environment it adds, and, when argv runs a
// shell that reads its commands from standard input, that input as a script (all of it is
// in the request).
func (in InForce) exec(argv, env []string, stdin []byte) policy.Decision {
	p := in.pol
	d := p.Shell(argv)
	if !d.Allow || !p.HasShellRules() {
		return d
	}
	if e := p.GatedEnv(env); !e.Allow {
		return e
	}
	if e := p.ShellEnv(env); !e.Allow {
		return e
	}
	if policy.StdinShell(argv) {
		if sd := p.ShellScript(string(stdin)); !sd.Allow {
			sd.Reason = "the shell's standard input: " + sd.Reason
			return sd
		}
	}
	return d
}

// stream decides a streaming exec: as exec, except that a shell reading its commands from
// the stream's input is an interactive session, whose commands arrive while it runs.
func (in InForce) stream(argv, env []string) policy.Decision {
	p := in.pol
	d := p.Shell(argv)
	if !d.Allow || !p.HasShellRules() {
		return d
	}
	if e := p.GatedEnv(env); !e.Allow {
		return e
	}
	if e := p.ShellEnv(env); !e.Allow {
		return e
	}
	if policy.StdinShell(argv) {
		if i := p.Interactive(); !i.Allow {
			return i
		}
	}
	return d
}

// Policies finds the policy in force for a sandbox. It is safe for concurrent use.
type Policies struct {
	st   *store.Store
	log  *slog.Logger
	file string // the default policy's file ("" without one)
	dir  string // <users_dir>/policies
	max  wire.Limits

	mu       sync.Mutex
	def      InForce // source none when there is no default; the last good one (ReloadDefault)
	compiled map[[sha256.Size]byte]*policy.Policy
	users    map[string]*userPolicy // by runner user name
}

// userPolicy is what was last read of one user's policy file.
type userPolicy struct {
	size int64
	mod  time.Time
	good InForce // the last version that loaded; pol nil when none did
	err  error   // why the current version does not load
}

// NewPolicies finds the policies in force: file is the server's default policy ("" for none),
// usersDir the runner's users_dir, max the server's max_limits.
func NewPolicies(file, usersDir string, max wire.Limits, st *store.Store, log *slog.Logger) (*Policies, error) {
	ps := &Policies{
		st: st, log: log, def: InForce{source: api.PolicyNone}, file: file,
		dir: filepath.Join(usersDir, userPolicyDir), max: max,
		compiled: map[[sha256.Size]byte]*policy.Policy{}, users: map[string]*userPolicy{},
	}
	if file == "" {
		return ps, nil
	}
	p, text, err := loadPolicyFile(file, file, max)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	ps.def = InForce{pol: p, source: api.PolicyDefault, text: text}
	return ps, nil
}

// CheckPolicyFile loads the policy file at file, whose resources must be within max, and
// says what is wrong with it.
func CheckPolicyFile(file string, max wire.Limits) error {
	_, _, err := loadPolicyFile(file, file, max)
	return err
}

// loadPolicyFile reads and loads a policy file whose resources must be within max; source
// names it in errors.
func loadPolicyFile(file, source string, max wire.Limits) (*policy.Policy, string, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %w", err, errdefs.ErrNotFound)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, policy.MaxFileSize+1))
	if err != nil {
		return nil, "", fmt.Errorf("read %s: %w", file, err)
	}
	p, err := policy.Load(b, source)
	if err != nil {
		return nil, "", err
	}
	if err := WithinMax(p.Resources(), max); err != nil {
		return nil, "", fmt.Errorf("%s: %w", source, err)
	}
	return p, string(b), nil
}

// WithinMax refuses resources over the server's max_limits: a policy may narrow what a
// sandbox gets, never widen it past what the operator allows anyone.
func WithinMax(r wire.Limits, max wire.Limits) error {
	over := func(field, got, limit string) error {
		return fmt.Errorf("resources.%s: %s is over the server's maximum (max_limits.%s) of %s: %w", field, got, field, limit, errdefs.ErrInvalidArgument)
	}
	switch {
	case max.Memory > 0 && r.Memory > max.Memory:
		return over("memory", r.Memory.String(), max.Memory.String())
	case max.CPUs > 0 && r.CPUs > max.CPUs:
		return over("cpus", fmt.Sprint(r.CPUs), fmt.Sprint(max.CPUs))
	case max.Pids > 0 && r.Pids > max.Pids:
		return over("pids", fmt.Sprint(r.Pids), fmt.Sprint(max.Pids))
	case max.Timeout > 0 && r.Timeout > max.Timeout:
		return over("timeout", r.Timeout.String(), max.Timeout.String())
	case max.Tmp > 0 && r.Tmp > max.Tmp:
		return over("tmp", r.Tmp.String(), max.Tmp.String())
	case max.FileSize > 0 && r.FileSize > max.FileSize:
		return over("file_size", r.FileSize.String(), max.FileSize.String())
	case max.Disk > 0 && r.Disk > max.Disk:
		return over("disk", r.Disk.String(), max.Disk.String())
	}
	return nil
}

// ForSandbox returns the policy in force for rec: its own, its owner's, the default, or
// none.
func (ps *Policies) ForSandbox(ctx context.Context, rec store.Sandbox) (InForce, error) {
	sp, err := ps.st.SandboxPolicy(ctx, rec.ID)
	switch {
	case err == nil:
		p, err := ps.compile(sp.Text)
		if err != nil {
			return InForce{}, fmt.Errorf("sandbox %s: its policy no longer loads (%v); attach a new one: %w", rec.ID, err, errdefs.ErrFailedPrecondition)
		}
		return InForce{pol: p, source: api.PolicySandbox, text: sp.Text, at: sp.UpdatedAt}, nil
	case !errors.Is(err, errdefs.ErrNotFound):
		return InForce{}, err
	}
	in, err := ps.user(runnerUser(rec.Username))
	if err != nil || in.pol != nil {
		return in, err
	}
	return ps.defaultPolicy(), nil
}

// defaultPolicy is the server's default policy in force.
func (ps *Policies) defaultPolicy() InForce {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return ps.def
}

// ReloadDefault reads the default policy's file again. One that does not load leaves the
// last good one in force, and the error says why (with the line and field).
func (ps *Policies) ReloadDefault() (changed bool, err error) {
	if ps.file == "" {
		return false, nil
	}
	p, text, err := loadPolicyFile(ps.file, ps.file, ps.max)
	if err != nil {
		return false, fmt.Errorf("policy: %w", err)
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	changed = text != ps.def.text
	ps.def = InForce{pol: p, source: api.PolicyDefault, text: text}
	return changed, nil
}

// ForNew returns the policy in force for a sandbox username is about to create: theirs,
// or the default (a new sandbox has none of its own).
func (ps *Policies) ForNew(username string) (InForce, error) {
	in, err := ps.user(runnerUser(username))
	if err != nil || in.pol != nil {
		return in, err
	}
	return ps.defaultPolicy(), nil
}

// PolicyLimits makes a create request's limits the policy's resources: a limit the request
// does not give is the policy's, and one over the policy's is refused, naming both.
func PolicyLimits(l *api.Limits, r wire.Limits) error {
	over := func(field, got, limit string) error {
		return fmt.Errorf("limits.%s: %s is over the policy's resources.%s of %s: %w", field, got, field, limit, errdefs.ErrInvalidArgument)
	}
	if r.Memory > 0 {
		if l.Memory == "" {
			l.Memory = r.Memory.String()
		} else if m, err := wire.ParseSize(l.Memory); err == nil && m > r.Memory {
			return over("memory", m.String(), r.Memory.String())
		}
	}
	if r.CPUs > 0 {
		if l.CPUs == 0 {
			l.CPUs = r.CPUs
		} else if l.CPUs > r.CPUs {
			return over("cpus", fmt.Sprint(l.CPUs), fmt.Sprint(r.CPUs))
		}
	}
	if r.Pids > 0 {
		if l.Pids == 0 {
			l.Pids = r.Pids
		} else if l.Pids > r.Pids {
			return over("pids", fmt.Sprint(l.Pids), fmt.Sprint(r.Pids))
		}
	}
	if err := policySize(&l.Tmp, r.Tmp, "tmp", over); err != nil {
		return err
	}
	if err := policySize(&l.FileSize, r.FileSize, "file_size", over); err != nil {
		return err
	}
	return policySize(&l.Disk, r.Disk, "disk", over)
}

// policySize makes a size limit of a create request (*l) the policy's (r, 0: none) when
// the request gives none, and refuses one over it.
func policySize(l *string, r wire.Size, field string, over func(field, got, limit string) error) error {
	if r <= 0 {
		return nil
	}
	if *l == "" {
		*l = r.String()
	} else if v, err := wire.ParseSize(*l); err == nil && v > r {
		return over(field, v.String(), r.String())
	}
	return nil
}

// compile loads a stored policy, once per distinct text.
func (ps *Policies) compile(text string) (*policy.Policy, error) {
	key := sha256.Sum256([]byte(text))
	ps.mu.Lock()
	p := ps.compiled[key]
	ps.mu.Unlock()
	if p != nil {
		return p, nil
	}
	p, err := policy.Load([]byte(text), "policy")
	if err != nil {
		return nil, err
	}
	ps.mu.Lock()
	if len(ps.compiled) >= maxCompiled {
		clear(ps.compiled)
	}
	ps.compiled[key] = p
	ps.mu.Unlock()
	return p, nil
}

// user returns user's policy from their file, reading it again when it changed.
func (ps *Policies) user(user string) (InForce, error) {
	file := filepath.Join(ps.dir, user+".yaml")
	fi, err := os.Stat(file)
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if errors.Is(err, os.ErrNotExist) {
		delete(ps.users, user)
		return InForce{source: api.PolicyNone}, nil
	}
	if err != nil {
		return InForce{}, fmt.Errorf("policy of user %s: %w", user, err)
	}
	up := ps.users[user]
	if up == nil || up.size != fi.Size() || !up.mod.Equal(fi.ModTime()) {
		if up == nil {
			up = &userPolicy{}
			ps.users[user] = up
		}
		up.size, up.mod = fi.Size(), fi.ModTime()
		p, text, err := loadPolicyFile(file, "policy of user "+user, ps.max)
		if up.err = err; err == nil {
			up.good = InForce{pol: p, source: api.PolicyUser, text: text}
		} else {
			ps.log.Warn("user policy does not load; the last good one stays in force", "user", user, "file", file, "err", err, "has_last_good", up.good.pol != nil)
		}
	}
	if up.good.pol == nil && up.err != nil {
		// The message is the user's to read: it names the line and field, not the path.
		return InForce{}, fmt.Errorf("nothing is allowed until the operator fixes the user's policy file: %v: %w", up.err, errdefs.ErrFailedPrecondition)
	}
	return up.good, nil
}

// policyOf returns the policy in force for sandbox id, which the caller has already been
// allowed to reach (fleet.Agent): its owner's, not the caller's (an admin acting on
// someone's sandbox is held to its rules).
func (o *Ops) policyOf(ctx context.Context, c fleet.Caller, id string) (InForce, error) {
	rec, ok := o.fleet.RunningRecord(id)
	if !ok {
		var err error
		if rec, err = o.fleet.Get(ctx, c, id); err != nil {
			return InForce{}, err
		}
	}
	return o.pol.ForSandbox(ctx, rec)
}

// decideFile decides op on the API path p (as the agent resolves it: relative to the
// workspace, which the sandbox sees at /workspace). A denial is audited and returned.
func (o *Ops) decideFile(ctx context.Context, c fleet.Caller, id string, in InForce, op policy.Op, p string, size int64) error {
	if in.pol == nil {
		return nil
	}
	abs, err := workspacePath(p)
	if err != nil {
		return err
	}
	d := in.pol.File(op, abs, size)
	if d.Allow {
		return nil
	}
	o.event(ctx, c.UserID, "sandbox.file_denied", map[string]any{"sandbox": id, "op": op.String(), "path": p, "policy": in.source, "rule": d.Rule})
	return in.denied(d)
}

// workspacePath is the API path p (relative to the workspace; see filePath) as the
// sandbox sees it, under /workspace: what policies and capabilities name.
func workspacePath(p string) (string, error) {
	rel, err := wire.ResolvePath(p)
	if err != nil {
		return "", err // the agent would refuse it the same way
	}
	return path.Join(wire.WorkspacePath, rel), nil
}

// policyDetail adds the decision to an audit event's detail when a policy is in force.
func policyDetail(detail map[string]any, in InForce, d policy.Decision) map[string]any {
	if in.pol != nil {
		detail["policy"], detail["rule"], detail["allowed"] = in.source, d.Rule, d.Allow
	}
	return detail
}

// Policy is the policy in force, nil when there is none.
func (in InForce) Policy() *policy.Policy { return in.pol }

// Source says where the policy comes from: an api.Policy* constant.
func (in InForce) Source() string { return in.source }

// GetPolicy is the policy in force for sandbox id, and where it comes from. Ownership is
// the fleet's: another user's sandbox is "not found".
func (o *Ops) GetPolicy(ctx context.Context, c fleet.Caller, id string) (api.SandboxPolicy, error) {
	rec, err := o.fleet.Get(ctx, c, id)
	if err != nil {
		return api.SandboxPolicy{}, err
	}
	in, err := o.pol.ForSandbox(ctx, rec)
	if err != nil {
		return api.SandboxPolicy{}, err
	}
	return apiPolicy(rec, in), nil
}

// PutPolicy attaches a policy file as sandbox id's own policy and applies its resources
// to the running sandbox. read gives the file, once c may change the policy. One that does
// not load is refused with the line and field, and the sandbox keeps the policy it had.
func (o *Ops) PutPolicy(ctx context.Context, c fleet.Caller, id string, read func() ([]byte, error)) (api.SandboxPolicy, error) {
	rec, err := o.fleet.Get(ctx, c, id)
	if err != nil {
		return api.SandboxPolicy{}, err
	}
	if err := o.mayChangePolicy(ctx, c, rec); err != nil {
		return api.SandboxPolicy{}, err
	}
	text, err := read()
	if err != nil {
		return api.SandboxPolicy{}, err
	}
	p, err := policy.Load(text, "policy")
	if err != nil {
		return api.SandboxPolicy{}, err
	}
	if err := WithinMax(p.Resources(), o.pol.max); err != nil {
		return api.SandboxPolicy{}, err
	}
	now := time.Now()
	rec, err = o.fleet.ApplyLimits(ctx, c, rec.ID, resourceLimits(p.Resources()), func(tx *store.Tx) error {
		if err := tx.PutSandboxPolicy(ctx, store.SandboxPolicy{SandboxID: rec.ID, Text: string(text), UpdatedBy: c.UserID, UpdatedAt: now}); err != nil {
			return err
		}
		return tx.AppendAudit(ctx, store.AuditEvent{At: now, ActorUserID: c.UserID, Action: "sandbox.policy_attach", Target: rec.ID,
			Detail: map[string]any{"summary": p.Summary(), "sha256": fmt.Sprintf("%x", sha256.Sum256(text))}})
	})
	if err != nil {
		return api.SandboxPolicy{}, err
	}
	return apiPolicy(rec, InForce{pol: p, source: api.PolicySandbox, text: string(text), at: now}), nil
}

// DeletePolicy detaches sandbox id's own policy.
func (o *Ops) DeletePolicy(ctx context.Context, c fleet.Caller, id string) error {
	rec, err := o.fleet.Get(ctx, c, id)
	if err != nil {
		return err
	}
	if err := o.mayChangePolicy(ctx, c, rec); err != nil {
		return err
	}
	return o.st.Update(ctx, func(tx *store.Tx) error {
		if err := tx.DeleteSandboxPolicy(ctx, rec.ID); err != nil {
			return err
		}
		return tx.AppendAudit(ctx, store.AuditEvent{At: time.Now(), ActorUserID: c.UserID, Action: "sandbox.policy_detach", Target: rec.ID})
	})
}

// mayChangePolicy says whether c may attach or detach rec's own policy. A sandbox's own
// policy replaces its owner's and the default, so a user (or an agent holding their
// token) who could attach one could lift the operator's rules with an empty policy, and
// one who could detach an admin's could return to laxer ones. So, for anyone but an
// admin: not while an operator's policy (the owner's file or the default) applies, and
// never a policy an admin attached. Without operator policies, a sandbox's own policy is
// its owner's self-restraint, which they may change.
func (o *Ops) mayChangePolicy(ctx context.Context, c fleet.Caller, rec store.Sandbox) error {
	if c.Admin {
		return nil
	}
	if sp, err := o.st.SandboxPolicy(ctx, rec.ID); err == nil && sp.UpdatedBy != c.UserID {
		return fmt.Errorf("sandbox %s: its policy was attached by an admin; only an admin may replace or detach it: %w", rec.ID, errdefs.ErrPermissionDenied)
	} else if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		return err
	}
	op, err := o.pol.ForNew(rec.Username)
	if err != nil {
		return err
	}
	if op.pol != nil {
		whose := map[string]string{api.PolicyUser: "the operator's policy for " + rec.Username, api.PolicyDefault: "the server's default policy"}[op.source]
		return fmt.Errorf("sandbox %s is governed by %s, which a sandbox's own policy would replace: only an admin may attach or detach one: %w", rec.ID, whose, errdefs.ErrPermissionDenied)
	}
	return nil
}

// resourceLimits are the runner's limits a policy's resources set; the timeout is not
// among them: it bounds each exec, where the policy in force is read (InForce.timeout).
func resourceLimits(r wire.Limits) wire.Limits {
	r.Timeout = 0
	return r
}

func apiPolicy(rec store.Sandbox, in InForce) api.SandboxPolicy {
	out := api.SandboxPolicy{Sandbox: rec.ID, Source: in.source, Policy: in.text, Limits: APILimits(rec)}
	if in.pol != nil {
		out.Summary = in.pol.Summary()
	}
	if in.source == api.PolicySandbox {
		at := in.at.UTC()
		out.UpdatedAt = &at
	}
	return out
}

// runnerUser is the runner's (and the policy files') name for a user: lower-cased, as
// usernames are unique ignoring ASCII case.
func runnerUser(username string) string { return strings.ToLower(username) }
