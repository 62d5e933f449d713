package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
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
//  1. here, when it arrives (Admit: signature, audience, revocation, subject — the
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

// capabilityKeysFile is the control plane's capability keyring, in the data dir.
const capabilityKeysFile = "capability.keys"

// agentTokenTTL bounds a token reissued for a sandbox's agent: long enough for one
// request to reach the agent, short enough that revocation needs no agent round trip.
const agentTokenTTL = time.Minute

// capabilities holds the control plane's capability keyring and what mints and checks
// tokens under it. The keyring is read again at a reload (Server.Reload), after
// `paddock sandbox capability rotate-key` added a key: a request uses the keyring in force
// when it began.
type capabilities struct {
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

func newCapabilities(dataDir string, st *store.Store) (*capabilities, error) {
	cs := &capabilities{file: filepath.Join(dataDir, capabilityKeysFile), revoked: storeRevocations{st}}
	keys, err := loadCapabilityKeys(cs.file)
	if err != nil {
		return nil, err
	}
	cs.use(keys)
	return cs, nil
}

func (cs *capabilities) use(keys *capability.Keyring) {
	cs.state.Store(&capabilityKeys{keys: keys, mint: capability.NewMinter(keys), verify: capability.NewVerifier(keys, cs.revoked)})
}

// now is the keyring in force.
func (cs *capabilities) now() *capabilityKeys { return cs.state.Load() }

// reload reads the keyring file again; one that does not load leaves the last one in
// force.
func (cs *capabilities) reload() (changed bool, err error) {
	keys, err := loadCapabilityKeys(cs.file)
	if err != nil {
		return false, err
	}
	old := cs.now().keys
	cs.use(keys)
	return old.Primary() != keys.Primary() || !slices.Equal(old.KeyIDs(), keys.KeyIDs()), nil
}

// agentKeys is the keyring the agent of sandbox id gets in its envelope: it verifies that
// sandbox's agent tokens and nothing else.
func (cs *capabilities) agentKeys(id string) string {
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

// CapabilityRotation is what RotateCapabilityKeys did.
type CapabilityRotation struct {
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
func RotateCapabilityKeys(cfg Config) (CapabilityRotation, error) {
	file := filepath.Join(cfg.Runner.DataDir, capabilityKeysFile)
	if _, err := os.Stat(file); err != nil {
		return CapabilityRotation{}, fmt.Errorf("capability rotate-key: no capability keyring at %s: give the server's --data or --config: %w", file, errdefs.ErrNotFound)
	}
	keys, err := loadCapabilityKeys(file)
	if err != nil {
		return CapabilityRotation{}, err
	}
	rotated, err := keys.WithKey(keys.NextID(), capability.NewRootKey())
	if err != nil {
		return CapabilityRotation{}, fmt.Errorf("capability rotate-key: %w", err)
	}
	if err := writeCapabilityKeys(file, rotated, func(tmp string) error { return os.Rename(tmp, file) }); err != nil {
		return CapabilityRotation{}, fmt.Errorf("capability rotate-key: write %s: %w", file, err)
	}
	return CapabilityRotation{File: file, From: keys.Primary(), To: rotated.Primary(), Kept: keys.KeyIDs()}, nil
}

// capabilityRoutes are the routes a capability token may be used on: a sandbox's exec
// and files. Every other route needs a session or an API token.
var capabilityRoutes = map[Route]bool{
	{"POST", "/api/v1/sandboxes/{id}/exec"}:            true,
	{"GET", "/api/v1/sandboxes/{id}/exec/stream"}:      true,
	{"GET", "/api/v1/sandboxes/{id}/files/list"}:       true,
	{"GET", "/api/v1/sandboxes/{id}/files/content"}:    true,
	{"PUT", "/api/v1/sandboxes/{id}/files/content"}:    true,
	{"DELETE", "/api/v1/sandboxes/{id}/files/content"}: true,
	{"POST", "/api/v1/sandboxes/{id}/files/mkdir"}:     true,
	{"POST", "/api/v1/sandboxes/{id}/files/move"}:      true,
	{"GET", "/api/v1/sandboxes/{id}/files/archive"}:    true,
	{"PUT", "/api/v1/sandboxes/{id}/files/archive"}:    true,
}

// capabilityBearer returns the capability token r carries as its bearer credential.
func capabilityBearer(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || !capability.IsToken(tok) {
		return "", false
	}
	return tok, true
}

// heldCapability is the token a request was admitted under.
type heldCapability struct {
	token   string
	subject string
	id      string
}

type heldCapabilityKey struct{}

func heldCapabilityOf(ctx context.Context) *heldCapability {
	h, _ := ctx.Value(heldCapabilityKey{}).(*heldCapability)
	return h
}

// serveCapability runs h for a request whose credential is a capability token: admitted
// for the sandbox the route names, acting as that sandbox's owner (never an admin), with
// the token held in the context for the handler's checks.
func (s *Server) serveCapability(w http.ResponseWriter, r *http.Request, rt Route, h apiHandler, token string) {
	if !capabilityRoutes[rt] {
		api.WriteError(w, s.log, fmt.Errorf("a capability token acts only on its sandbox's exec and file routes; %s %s needs a session or an API token: %w",
			rt.Method, rt.Pattern, errdefs.ErrPermissionDenied))
		return
	}
	id := r.PathValue("id")
	subject := capabilitySubject(id)
	d, err := s.caps.now().verify.Admit(r.Context(), token, subject, time.Time{})
	if err != nil {
		s.capabilityDenied(r.Context(), "", id, "", "", err)
		api.WriteError(w, s.log, err)
		return
	}
	rec, err := s.st.SandboxByID(r.Context(), id)
	if err != nil {
		api.WriteError(w, s.log, err)
		return
	}
	ctx := context.WithValue(r.Context(), heldCapabilityKey{}, &heldCapability{token: token, subject: subject, id: d.Claims.ID})
	c := fleet.Caller{UserID: rec.UserID, Username: rec.Username}
	if err := h(w, r.WithContext(ctx), c); err != nil && !errors.Is(err, errResponded) {
		api.WriteError(w, s.log, err)
	}
}

// underCapability checks reqs against the token the request was admitted under, if any,
// and returns the token reissued for the sandbox's agent to check again ("" when the
// request carries no capability). A refusal is audited and returned as it is: it says
// which token, which caveat and why.
func (s *Server) underCapability(ctx context.Context, reqs ...capability.Request) (string, error) {
	h := heldCapabilityOf(ctx)
	if h == nil {
		return "", nil
	}
	var d capability.Decision
	for _, req := range reqs {
		req.Subject = h.subject
		var err error
		if d, err = s.caps.now().verify.Verify(ctx, h.token, req); err != nil {
			s.capabilityDenied(ctx, h.id, strings.TrimPrefix(h.subject, "sandbox:"), req.Resource, string(req.Action), err)
			return "", err
		}
	}
	return s.caps.now().mint.Reissue(d, capability.Agent, time.Now().Add(agentTokenTTL))
}

// capabilityFile checks a file operation on the API path p (workspace-relative, as the
// agent takes it) under the request's capability.
func (s *Server) capabilityFile(ctx context.Context, p string, action capability.Action, size int64) (string, error) {
	if heldCapabilityOf(ctx) == nil {
		return "", nil
	}
	abs, err := workspacePath(p)
	if err != nil {
		return "", err
	}
	return s.underCapability(ctx, capability.Request{Resource: "file:" + abs, Action: action, Size: size})
}

// capabilityMove checks a move from the API path from to the API path to: delete on
// from, write on to. The one token reissued carries both to the agent.
func (s *Server) capabilityMove(ctx context.Context, from, to string) (string, error) {
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
	return s.underCapability(ctx, capability.Request{Resource: "file:" + src, Action: capability.Delete},
		capability.Request{Resource: "file:" + dst, Action: capability.Write})
}

// capabilityExec checks that the request's capability allows every program argv runs
// (argv[0], and what sh -c strings, pipelines and wrappers lead to: policy.Programs), and
// that env carries no code bash would run in their place.
func (s *Server) capabilityExec(ctx context.Context, argv, env []string) (string, error) {
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
	return s.underCapability(ctx, reqs...)
}

// capabilityDenied audits a refused capability: the token's ID and why, never the token.
func (s *Server) capabilityDenied(ctx context.Context, tokenID, sandboxID, resource, action string, err error) {
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
	if rec, ok := s.fleet.RunningRecord(sandboxID); ok {
		userID = rec.UserID
	}
	s.event(ctx, userID, "sandbox.capability_denied", detail)
}

// The routes: mint, list and revoke a sandbox's capability tokens. Only the owner (or an
// admin) does this, with a session or an API token — never with a capability.

func (s *Server) mintCapability(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	rec, err := s.fleet.Get(r.Context(), c, r.PathValue("id"))
	if err != nil {
		return err
	}
	var req api.CapabilityRequest
	if err := api.DecodeJSON(w, r, &req, 16<<10); err != nil {
		return err
	}
	ttl := req.TTLSeconds
	switch {
	case ttl == 0:
		ttl = 3600
	case ttl < 0 || ttl > api.MaxCapabilityTTL:
		return fmt.Errorf("ttl_seconds: %d is not between 1 and %d (30 days): %w", ttl, api.MaxCapabilityTTL, errdefs.ErrInvalidArgument)
	}
	actions := make([]capability.Action, len(req.Actions))
	for i, a := range req.Actions {
		actions[i] = capability.Action(a)
	}
	now := time.Now()
	tok, err := s.caps.now().mint.Mint(capability.Claims{
		Subject: capabilitySubject(rec.ID), Resource: req.Resource, Actions: actions,
		Constraints: capability.Constraints{MaxSize: req.MaxSize, AllowedExtensions: req.AllowedExtensions, Expiry: now.Add(time.Duration(ttl) * time.Second)},
	})
	if err != nil {
		return err
	}
	cl := tok.Claims
	names := make([]string, len(cl.Actions))
	for i, a := range cl.Actions {
		names[i] = string(a)
	}
	row := store.Capability{ID: cl.ID, SandboxID: rec.ID, MintedBy: c.UserID, Resource: cl.Resource, Actions: names, ExpiresAt: cl.Constraints.Expiry, CreatedAt: now}
	err = s.st.Update(r.Context(), func(tx *store.Tx) error {
		if err := tx.CreateCapability(r.Context(), row); err != nil {
			return err
		}
		return tx.AppendAudit(r.Context(), store.AuditEvent{At: now, ActorUserID: c.UserID, Action: "sandbox.capability_mint", Target: rec.ID,
			Detail: map[string]any{"capability": cl.ID, "resource": cl.Resource, "actions": names, "expires_at": cl.Constraints.Expiry}})
	})
	if err != nil {
		return err
	}
	out := apiCapability(row)
	out.MaxSize, out.AllowedExtensions, out.Token = cl.Constraints.MaxSize, cl.Constraints.AllowedExtensions, tok.Encoded()
	api.WriteJSON(w, http.StatusCreated, out)
	return nil
}

func (s *Server) listCapabilities(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	rec, err := s.fleet.Get(r.Context(), c, r.PathValue("id"))
	if err != nil {
		return err
	}
	rows, err := s.st.ListCapabilities(r.Context(), rec.ID)
	if err != nil {
		return err
	}
	out := api.CapabilityList{Capabilities: make([]api.Capability, len(rows))}
	for i, row := range rows {
		out.Capabilities[i] = apiCapability(row)
	}
	api.WriteJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) revokeCapability(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	rec, err := s.fleet.Get(r.Context(), c, r.PathValue("id"))
	if err != nil {
		return err
	}
	now := time.Now()
	var row store.Capability
	err = s.st.Update(r.Context(), func(tx *store.Tx) error {
		if row, err = tx.RevokeCapability(r.Context(), rec.ID, r.PathValue("cap"), now); err != nil {
			return err
		}
		return tx.AppendAudit(r.Context(), store.AuditEvent{At: now, ActorUserID: c.UserID, Action: "sandbox.capability_revoke", Target: rec.ID,
			Detail: map[string]any{"capability": row.ID}})
	})
	if err != nil {
		return err
	}
	api.WriteJSON(w, http.StatusOK, apiCapability(row))
	return nil
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
