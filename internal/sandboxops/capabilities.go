package sandboxops

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/capability"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/fleet"
	"github.com/paddockhq/paddock/internal/policy"
	"github.com/paddockhq/paddock/internal/store"
)

// Capability tokens (package capability) as credentials on the API.
//
// A sandbox's owner mints a token for it (POST /api/v1/sandboxes/{id}/capabilities) and
// hands it to whatever should act on the sandbox with less than the owner's power — an AI
// agent's tool loop, a build step. The holder sends it as "Authorization: Bearer pdk1.…"
// on the sandbox's exec and file routes, and nowhere else. Every request is checked
// twice:
//
//  1. here, when it arrives (AdmitCapability: signature, audience, revocation, subject — the
//     sandbox in the URL, never a field of the request — and the validity window), and
//     again for what it asks (Verify: the file path as the API names it, the programs
//     the command line runs, the size of a write);
//  2. by the sandbox's agent, which gets the token reissued for its own audience with the
//     same claims and caveats (Minter.Reissue, valid for agentTokenTTL) and checks it
//     against what it really touches: the path with symlinks resolved inside the
//     workspace, the bytes really read or written.
//
// The owner's policy applies as well; a capability never widens it. Revocation is by
// token ID, in the store, and takes effect at the next request: the reissued agent
// tokens live only agentTokenTTL.

// KeysFile is the control plane's capability keyring, in the data dir.
const KeysFile = "capability.keys"

// agentTokenTTL bounds a token reissued for a sandbox's agent: long enough for one
// request to reach the agent, short enough that revocation needs no agent round trip.
const agentTokenTTL = time.Minute

// Capabilities holds the control plane's capability keyring and what mints and checks
// tokens under it. The keyring is read again at a reload (the server's Reload), after
// `paddock sandbox capability rotate-key` added a key: a request uses the keyring in force
// when it began.
type Capabilities struct {
	file    string
	revoked capability.RevocationList
	state   atomic.Pointer[capabilityKeys]
}

// capabilityKeys is one version of the keyring, with its minter and verifier.
type capabilityKeys struct {
	keys   *capability.Keyring
	mint   *capability.Minter
	verify *capability.Verifier
}

// NewCapabilities reads the keyring in dataDir, or makes one when there is none.
func NewCapabilities(dataDir string, st *store.Store) (*Capabilities, error) {
	cs := &Capabilities{file: filepath.Join(dataDir, KeysFile), revoked: storeRevocations{st}}
	keys, err := loadCapabilityKeys(cs.file)
	if err != nil {
		return nil, err
	}
	cs.use(keys)
	return cs, nil
}

func (cs *Capabilities) use(keys *capability.Keyring) {
	cs.state.Store(&capabilityKeys{keys: keys, mint: capability.NewMinter(keys), verify: capability.NewVerifier(keys, cs.revoked)})
}

// now is the keyring in force.
func (cs *Capabilities) now() *capabilityKeys { return cs.state.Load() }

// Reload reads the keyring file again; one that does not load leaves the last one in
// force.
func (cs *Capabilities) Reload() (changed bool, err error) {
	keys, err := loadCapabilityKeys(cs.file)
	if err != nil {
		return false, err
	}
	old := cs.now().keys
	cs.use(keys)
	return old.Primary() != keys.Primary() || !slices.Equal(old.KeyIDs(), keys.KeyIDs()), nil
}

// AgentKeys is the keyring the agent of sandbox id gets in its envelope: it verifies that
// sandbox's agent tokens and nothing else.
func (cs *Capabilities) AgentKeys(id string) string {
	k, err := cs.now().keys.ForAgent(capabilitySubject(id))
	if err != nil {
		return "" // not reached: sandbox IDs are valid subjects; the agent then refuses every token
	}
	return string(k.Export())
}

func capabilitySubject(sandboxID string) string { return "sandbox:" + sandboxID }

// storeRevocations is the revocation list: a token is usable only while the store holds
// its record unrevoked.
type storeRevocations struct{ st *store.Store }

func (r storeRevocations) Revoked(ctx context.Context, id string) (bool, error) {
	return r.st.CapabilityRevoked(ctx, id)
}

// loadCapabilityKeys reads the keyring at file, or makes one with a fresh key when there
// is none. A keyring that others may read is refused, as the secrets key is.
func loadCapabilityKeys(file string) (*capability.Keyring, error) {
	f, err := os.Open(file)
	if errors.Is(err, os.ErrNotExist) {
		return makeCapabilityKeys(file)
	}
	if err != nil {
		return nil, fmt.Errorf("capability keyring: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	switch {
	case err != nil:
		return nil, fmt.Errorf("capability keyring: %w", err)
	case !fi.Mode().IsRegular():
		return nil, fmt.Errorf("capability keyring %s is not a regular file: %w", file, errdefs.ErrFailedPrecondition)
	case fi.Mode().Perm()&0o077 != 0:
		return nil, fmt.Errorf("capability keyring %s has mode %04o: others may read the keys that sign capability tokens; chmod 600 %s and start again: %w",
			file, fi.Mode().Perm(), file, errdefs.ErrFailedPrecondition)
	}
	data, err := io.ReadAll(io.LimitReader(f, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("capability keyring %s: %w", file, err)
	}
	keys, err := capability.ParseKeyring(data)
	if err != nil {
		return nil, fmt.Errorf("capability keyring %s: %w", file, err)
	}
	if keys.Agent() != "" {
		return nil, fmt.Errorf("capability keyring %s is a sandbox agent's, not the control plane's: %w", file, errdefs.ErrFailedPrecondition)
	}
	return keys, nil
}

// makeCapabilityKeys writes a new keyring to file, durably, and fails if another start
// made one meanwhile (then that one is read).
func makeCapabilityKeys(file string) (*capability.Keyring, error) {
	keys, err := capability.NewKeyring(1, map[uint32]capability.RootKey{1: capability.NewRootKey()})
	if err != nil {
		return nil, err
	}
	err = writeCapabilityKeys(file, keys, func(tmp string) error { return os.Link(tmp, file) })
	if errors.Is(err, os.ErrExist) {
		return loadCapabilityKeys(file)
	}
	if err != nil {
		return nil, fmt.Errorf("capability keyring: write %s: %w", file, err)
	}
	return keys, nil
}

// writeCapabilityKeys writes keys to a new file (0600) beside file, syncs it and puts it in
// place with install (a link for a first keyring, a rename for a rotated one).
func writeCapabilityKeys(file string, keys *capability.Keyring, install func(tmp string) error) error {
	tmp, err := os.CreateTemp(filepath.Dir(file), ".capability-keys-*") // 0600
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(keys.Export())
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return install(tmp.Name())
}

// Rotation is what RotateCapabilityKeys did.
type Rotation struct {
	File     string
	From, To uint32   // the primary key ID before and after
	Kept     []uint32 // the key IDs still there besides the new one
}

// RotateCapabilityKeys adds a new key to the capability keyring of cfg's server and makes
// it primary: tokens minted from then on are signed under it, those minted before still
// verify, and running sandboxes keep working (their agents' tokens are signed under the
// oldest key, see capability.Minter.Mint). A running server uses the new key once it
// reloads (SIGHUP). Dropping a key, after a leak, is deleting its "key N" line from the
// file: tokens signed under it stop verifying, and sandboxes started before the key that
// is then the oldest must be restarted.
func RotateKeys(dataDir string) (Rotation, error) {
	file := filepath.Join(dataDir, KeysFile)
	if _, err := os.Stat(file); err != nil {
		return Rotation{}, fmt.Errorf("capability rotate-key: no capability keyring at %s: give the server's --data or --config: %w", file, errdefs.ErrNotFound)
	}
	keys, err := loadCapabilityKeys(file)
	if err != nil {
		return Rotation{}, err
	}
	rotated, err := keys.WithKey(keys.NextID(), capability.NewRootKey())
	if err != nil {
		return Rotation{}, fmt.Errorf("capability rotate-key: %w", err)
	}
	if err := writeCapabilityKeys(file, rotated, func(tmp string) error { return os.Rename(tmp, file) }); err != nil {
		return Rotation{}, fmt.Errorf("capability rotate-key: write %s: %w", file, err)
	}
	return Rotation{File: file, From: keys.Primary(), To: rotated.Primary(), Kept: keys.KeyIDs()}, nil
}

// heldCapability is the token a request was admitted under.
type heldCapability struct {
	token   string
	subject string
	id      string
}

type heldCapabilityKey struct{}

// AdmitCapability checks token, a capability token a request carries as its credential,
// for sandbox id (signature, audience, revocation, subject, validity window), and returns
// ctx holding it: every operation under that context is checked against it, and passes it
// on reissued to the sandbox's agent. A refusal is audited.
func (o *Ops) AdmitCapability(ctx context.Context, token, id string) (context.Context, error) {
	subject := capabilitySubject(id)
	d, err := o.caps.now().verify.Admit(ctx, token, subject, time.Time{})
	if err != nil {
		o.capabilityDenied(ctx, "", id, "", "", err)
		return nil, err
	}
	return context.WithValue(ctx, heldCapabilityKey{}, &heldCapability{token: token, subject: subject, id: d.Claims.ID}), nil
}

// HoldsCapability says whether ctx acts under a capability token.
func HoldsCapability(ctx context.Context) bool { return heldCapabilityOf(ctx) != nil }

func heldCapabilityOf(ctx context.Context) *heldCapability {
	h, _ := ctx.Value(heldCapabilityKey{}).(*heldCapability)
	return h
}

// underCapability checks reqs against the token the request was admitted under, if any,
// and returns the token reissued for the sandbox's agent to check again ("" when the
// request carries no capability). A refusal is audited and returned as it is: it says
// which token, which caveat and why.
func (o *Ops) underCapability(ctx context.Context, reqs ...capability.Request) (string, error) {
	h := heldCapabilityOf(ctx)
	if h == nil {
		return "", nil
	}
	var d capability.Decision
	for _, req := range reqs {
		req.Subject = h.subject
		var err error
		if d, err = o.caps.now().verify.Verify(ctx, h.token, req); err != nil {
			o.capabilityDenied(ctx, h.id, strings.TrimPrefix(h.subject, "sandbox:"), req.Resource, string(req.Action), err)
			return "", err
		}
	}
	return o.caps.now().mint.Reissue(d, capability.Agent, time.Now().Add(agentTokenTTL))
}

// capabilityFile checks a file operation on the API path p (workspace-relative, as the
// agent takes it) under the request's capability.
func (o *Ops) capabilityFile(ctx context.Context, p string, action capability.Action, size int64) (string, error) {
	if heldCapabilityOf(ctx) == nil {
		return "", nil
	}
	abs, err := workspacePath(p)
	if err != nil {
		return "", err
	}
	return o.underCapability(ctx, capability.Request{Resource: "file:" + abs, Action: action, Size: size})
}

// capabilityMove checks a move from the API path from to the API path to: delete on
// from, write on to. The one token reissued carries both to the agent.
func (o *Ops) capabilityMove(ctx context.Context, from, to string) (string, error) {
	if heldCapabilityOf(ctx) == nil {
		return "", nil
	}
	src, err := workspacePath(from)
	if err != nil {
		return "", err
	}
	dst, err := workspacePath(to)
	if err != nil {
		return "", err
	}
	return o.underCapability(ctx, capability.Request{Resource: "file:" + src, Action: capability.Delete},
		capability.Request{Resource: "file:" + dst, Action: capability.Write})
}

// capabilityExec checks that the request's capability allows every program argv runs
// (argv[0], and what sh -c strings, pipelines and wrappers lead to: policy.Programs), and
// that env carries no code bash would run in their place.
func (o *Ops) capabilityExec(ctx context.Context, argv, env []string) (string, error) {
	if heldCapabilityOf(ctx) == nil {
		return "", nil
	}
	progs, err := policy.Programs(argv)
	if err == nil {
		err = policy.EnvCode(env)
	}
	if err != nil {
		return "", fmt.Errorf("under a capability, what a command runs must be known before it runs: %v: %w", err, errdefs.ErrPermissionDenied)
	}
	reqs := make([]capability.Request, len(progs))
	for i, p := range progs {
		reqs[i] = capability.Request{Resource: "exec:" + p, Action: capability.Exec}
	}
	return o.underCapability(ctx, reqs...)
}

// capabilityDenied audits a refused capability: the token's ID and why, never the token.
func (o *Ops) capabilityDenied(ctx context.Context, tokenID, sandboxID, resource, action string, err error) {
	detail := map[string]any{"sandbox": sandboxID, "error": err.Error()}
	var ce *capability.Error
	if errors.As(err, &ce) {
		detail["reason"] = string(ce.Reason)
	}
	if tokenID != "" {
		detail["capability"] = tokenID
	}
	if resource != "" {
		detail["resource"], detail["action"] = resource, action
	}
	userID := ""
	if rec, ok := o.fleet.RunningRecord(sandboxID); ok {
		userID = rec.UserID
	}
	o.event(ctx, userID, "sandbox.capability_denied", detail)
}

// Minting, listing and revoking a sandbox's capability tokens. Only the owner (or an
// admin) does this, never under a capability: the front door refuses it.

// MintCapability mints a token for sandbox id; the result carries the token, once.
func (o *Ops) MintCapability(ctx context.Context, c fleet.Caller, id string, req api.CapabilityRequest) (api.Capability, error) {
	rec, err := o.fleet.Get(ctx, c, id)
	if err != nil {
		return api.Capability{}, err
	}
	ttl := req.TTLSeconds
	switch {
	case ttl == 0:
		ttl = 3600
	case ttl < 0 || ttl > api.MaxCapabilityTTL:
		return api.Capability{}, fmt.Errorf("ttl_seconds: %d is not between 1 and %d (30 days): %w", ttl, api.MaxCapabilityTTL, errdefs.ErrInvalidArgument)
	}
	actions := make([]capability.Action, len(req.Actions))
	for i, a := range req.Actions {
		actions[i] = capability.Action(a)
	}
	now := time.Now()
	tok, err := o.caps.now().mint.Mint(capability.Claims{
		Subject: capabilitySubject(rec.ID), Resource: req.Resource, Actions: actions,
		Constraints: capability.Constraints{MaxSize: req.MaxSize, AllowedExtensions: req.AllowedExtensions, Expiry: now.Add(time.Duration(ttl) * time.Second)},
	})
	if err != nil {
		return api.Capability{}, err
	}
	cl := tok.Claims
	names := make([]string, len(cl.Actions))
	for i, a := range cl.Actions {
		names[i] = string(a)
	}
	row := store.Capability{ID: cl.ID, SandboxID: rec.ID, MintedBy: c.UserID, Resource: cl.Resource, Actions: names, ExpiresAt: cl.Constraints.Expiry, CreatedAt: now}
	err = o.st.Update(ctx, func(tx *store.Tx) error {
		if err := tx.CreateCapability(ctx, row); err != nil {
			return err
		}
		return tx.AppendAudit(ctx, store.AuditEvent{At: now, ActorUserID: c.UserID, Action: "sandbox.capability_mint", Target: rec.ID,
			Detail: map[string]any{"capability": cl.ID, "resource": cl.Resource, "actions": names, "expires_at": cl.Constraints.Expiry}})
	})
	if err != nil {
		return api.Capability{}, err
	}
	out := apiCapability(row)
	out.MaxSize, out.AllowedExtensions, out.Token = cl.Constraints.MaxSize, cl.Constraints.AllowedExtensions, tok.Encoded()
	return out, nil
}

// ListCapabilities lists sandbox id's tokens, revoked and expired ones included.
func (o *Ops) ListCapabilities(ctx context.Context, c fleet.Caller, id string) (api.CapabilityList, error) {
	rec, err := o.fleet.Get(ctx, c, id)
	if err != nil {
		return api.CapabilityList{}, err
	}
	rows, err := o.st.ListCapabilities(ctx, rec.ID)
	if err != nil {
		return api.CapabilityList{}, err
	}
	out := api.CapabilityList{Capabilities: make([]api.Capability, len(rows))}
	for i, row := range rows {
		out.Capabilities[i] = apiCapability(row)
	}
	return out, nil
}

// RevokeCapability revokes sandbox id's token capID: from the next request on, it is
// refused.
func (o *Ops) RevokeCapability(ctx context.Context, c fleet.Caller, id, capID string) (api.Capability, error) {
	rec, err := o.fleet.Get(ctx, c, id)
	if err != nil {
		return api.Capability{}, err
	}
	now := time.Now()
	var row store.Capability
	err = o.st.Update(ctx, func(tx *store.Tx) error {
		if row, err = tx.RevokeCapability(ctx, rec.ID, capID, now); err != nil {
			return err
		}
		return tx.AppendAudit(ctx, store.AuditEvent{At: now, ActorUserID: c.UserID, Action: "sandbox.capability_revoke", Target: rec.ID,
			Detail: map[string]any{"capability": row.ID}})
	})
	if err != nil {
		return api.Capability{}, err
	}
	return apiCapability(row), nil
}

func apiCapability(row store.Capability) api.Capability {
	out := api.Capability{ID: row.ID, Sandbox: row.SandboxID, Subject: capabilitySubject(row.SandboxID), Resource: row.Resource,
		Actions: row.Actions, ExpiresAt: row.ExpiresAt, CreatedAt: row.CreatedAt}
	if !row.RevokedAt.IsZero() {
		t := row.RevokedAt
		out.RevokedAt = &t
	}
	return out
}

// VerifyConnect verifies a net: capability token a request to the egress proxy carries, as
// the API verifies the others: under the keyring in force, against the revocations in the
// store, for the sandbox the connection came from (its listener or channel, never a field
// of the request). The sandbox's owner mints them (resource net:HOST, action connect). It
// returns the token's ID.
func (cs *Capabilities) VerifyConnect(ctx context.Context, sandbox, token, resource string) (string, error) {
	d, err := cs.now().verify.Verify(ctx, token, capability.Request{Subject: capabilitySubject(sandbox), Resource: resource, Action: capability.Connect})
	if err != nil {
		return "", err
	}
	return d.Claims.ID, nil
}
