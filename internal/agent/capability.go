package agent

import (
	"cmp"
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"os"
	"path"
	"strings"
	"sync"

	"github.com/paddockhq/paddock/internal/agent/files"
	"github.com/paddockhq/paddock/internal/agent/session"
	"github.com/paddockhq/paddock/internal/capability"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/policy"
	"github.com/paddockhq/paddock/internal/wire"
)

// capabilities verifies the Agent-audience capability tokens that file and exec requests
// carry (package capability). The control plane verifies a ControlPlane token at its API
// and forwards, for the request made under it, an Agent token of the same claims and
// caveats; the agent verifies that one against what only it can know: the file a path
// really leads to inside the workspace (package files, through Guard), and the programs
// a command line really runs. A request without a token is not checked here: the control
// plane decided on it alone.
type capabilities struct {
	// verifier holds the agent's keyring; nil when the envelope brought none, and then
	// every request that carries a token is refused.
	verifier *capability.Verifier
	// subject is "sandbox:<id>": every request arrives on this sandbox's channel, so this
	// is who asks, whatever the token says.
	subject string
	log     *slog.Logger
	// policies are the policies requests carried, loaded, by the hash of their text.
	policies policyCache
}

// policyCache keeps the last few policies requests carried, loaded: a sandbox has one
// policy in force at a time, so a handful covers a change of policy mid-flight.
type policyCache struct {
	mu sync.Mutex
	m  map[[sha256.Size]byte]*policy.Policy
}

// load returns the policy of text, loading it on first sight. One that does not load
// refuses the request: the control plane sends only policies that loaded there, so this
// agent reads them differently (an older agent), and deciding without them would let
// through what the operator denied.
func (pc *policyCache) load(text string) (*policy.Policy, error) {
	key := sha256.Sum256([]byte(text))
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if p, ok := pc.m[key]; ok {
		return p, nil
	}
	p, err := policy.Load([]byte(text), "policy")
	if err != nil {
		return nil, fmt.Errorf("the sandbox's policy does not load in this agent: %v: %w", err, errdefs.ErrFailedPrecondition)
	}
	if pc.m == nil || len(pc.m) >= 8 {
		pc.m = map[[sha256.Size]byte]*policy.Policy{}
	}
	pc.m[key] = p
	return p, nil
}

var _ files.Guard = (*capabilities)(nil)

// newCapabilities reads the keyring of env. It must be an agent's keyring, and this
// sandbox's: a control plane's keyring holds root keys, which mint any token for any
// sandbox and must never be inside one.
func newCapabilities(env *wire.Envelope, log *slog.Logger) (*capabilities, error) {
	c := &capabilities{subject: "sandbox:" + env.SandboxID, log: log}
	if env.CapabilityKeys == "" {
		return c, nil
	}
	keys, err := capability.ParseKeyring([]byte(env.CapabilityKeys))
	if err != nil {
		return nil, fmt.Errorf("capability keys: %w", err)
	}
	switch keys.Agent() {
	case c.subject:
	case "":
		return nil, fmt.Errorf("capability keys: the envelope holds the control plane's root keys, not a keyring derived for %s (Keyring.ForAgent): %w", c.subject, errdefs.ErrInvalidArgument)
	default:
		return nil, fmt.Errorf("capability keys: the keyring is for %s, not %s: %w", keys.Agent(), c.subject, errdefs.ErrInvalidArgument)
	}
	// The revocation list stays empty: nothing tells the agent of a revocation. The
	// control plane checks revocation before it forwards a token, and forwards
	// short-lived ones, so a revoked token is dead here within minutes.
	c.verifier = capability.NewVerifier(keys, nil)
	log.Info("verifying capability tokens", "subject", c.subject, "keyring", keys)
	return c, nil
}

// errNoKeyring refuses a token on an agent that cannot verify one.
var errNoKeyring = fmt.Errorf("the request carries a capability token, and this agent holds no capability keyring to verify it: %w", errdefs.ErrFailedPrecondition)

// verify decides req, made by this sandbox, under token.
func (c *capabilities) verify(ctx context.Context, token string, req capability.Request) (capability.Decision, error) {
	if c.verifier == nil {
		return capability.Decision{}, errNoKeyring
	}
	req.Subject = c.subject
	d, err := c.verifier.Verify(ctx, token, req)
	if err != nil {
		c.log.Info("capability refused", "resource", req.Resource, "action", req.Action, "err", err)
	}
	return d, err
}

// Allow implements files.Guard: the grant's token must allow action, and its policy's
// file rules op, on the file at path, which the files service found with symlinks
// resolved.
func (c *capabilities) Allow(ctx context.Context, g files.Grant, action capability.Action, op policy.Op, path string, size int64) (int64, error) {
	var maxSize int64
	if g.Token != "" {
		d, err := c.verify(ctx, g.Token, capability.Request{Resource: "file:" + path, Action: action, Size: size})
		if err != nil {
			return 0, err
		}
		maxSize = smallestMaxSize(d)
	}
	if g.Policy != "" {
		p, err := c.policies.load(g.Policy)
		if err != nil {
			return 0, err
		}
		if d := p.File(op, path, size); !d.Allow {
			c.log.Info("policy refused a file operation", "path", path, "op", op, "rule", d.Rule)
			return 0, fmt.Errorf("denied by the sandbox's policy where the path leads (%s), rule %s: %s: %w", path, d.Rule, d.Reason, errdefs.ErrPermissionDenied)
		}
		if m := p.MaxFileSize(); m > 0 && op != policy.Read && (maxSize == 0 || m < maxSize) {
			maxSize = m
		}
	}
	return maxSize, nil
}

// smallestMaxSize is the max_size that decides: the smallest of the claims' and the
// caveats', 0 when none sets one.
func smallestMaxSize(d capability.Decision) int64 {
	m := d.Claims.Constraints.MaxSize
	for _, cv := range d.Caveats {
		if s := cv.Constraints.MaxSize; s != 0 && (m == 0 || s < m) {
			m = s
		}
	}
	return m
}

// allowExec verifies token for running argv with the request's env: exec of every
// program argv runs (policy.Programs: argv[0], and what sh -c strings, wrappers and
// pipelines in it run), which it returns. A command line whose programs cannot be known
// from its text, or whose environment holds code bash would run (BASH_FUNC_…), is refused.
func (c *capabilities) allowExec(ctx context.Context, token string, argv, env []string) ([]string, error) {
	if c.verifier == nil {
		return nil, errNoKeyring
	}
	progs, err := policy.Programs(argv)
	if err != nil {
		return nil, fmt.Errorf("exec under a capability token: %v: %w", err, errdefs.ErrPermissionDenied)
	}
	if err := policy.EnvCode(env); err != nil {
		return nil, fmt.Errorf("exec under a capability token: %v: what it runs is in no word of the command line: %w", err, errdefs.ErrPermissionDenied)
	}
	for _, p := range progs {
		if _, err := c.verify(ctx, token, capability.Request{Resource: "exec:" + p, Action: capability.Exec}); err != nil {
			return nil, fmt.Errorf("exec %s: %w", p, err)
		}
	}
	return progs, nil
}

// anyProgram is a program name no grant names but exec:*: a token that allows it allows
// every program.
const anyProgram = "paddock-any-program"

// execOnly is what a command under token may execute: the files of progs, the programs
// its command line runs (allowExec's), found as the session will find them (the sandbox's default PATH: a
// gated exec cannot set PATH), with the interpreters they need (session.ExecClosure); nil
// when the token grants every program (exec:*). A command line that names a program by a
// path is refused unless that path leads to the file the grant means, the one PATH finds.
// A kernel without Landlock cannot hold this, and the exec is refused.
func (c *capabilities) execOnly(ctx context.Context, token string, m *session.Manager, spec *session.Spec, progs []string) ([]string, error) {
	if _, err := c.verifier.Verify(ctx, token, capability.Request{Subject: c.subject, Resource: "exec:" + anyProgram, Action: capability.Exec}); err == nil {
		return nil, nil
	}
	if why := session.CanRestrictExec(); why != "" {
		return nil, fmt.Errorf("exec under a capability token: %s; such an exec is refused here rather than run unlimited: %w", why, errdefs.ErrFailedPrecondition)
	}
	files := make([]string, 0, len(progs))
	for _, name := range progs {
		if p, err := m.Resolve(name, ""); err == nil {
			files = append(files, p)
		}
	}
	if argv0 := spec.Argv[0]; strings.Contains(argv0, "/") {
		got, err := m.Resolve(argv0, spec.Cwd)
		want, werr := m.Resolve(path.Base(argv0), "")
		if err == nil && werr == nil && !sameFile(got, want) || err == nil && werr != nil {
			return nil, fmt.Errorf("exec %s under a capability token: the grant of %s is the program the sandbox's PATH finds (%s), not another file of that name: %w",
				argv0, path.Base(argv0), cmp.Or(want, "none"), errdefs.ErrPermissionDenied)
		}
	}
	return session.ExecClosure(files, m.DefaultPath())
}

func sameFile(a, b string) bool {
	fa, err := os.Stat(a)
	if err != nil {
		return false
	}
	fb, err := os.Stat(b)
	return err == nil && os.SameFile(fa, fb)
}
