package capability

import (
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"strings"
	"time"
)

// Action is what a token allows done to its resource. The set is closed: a token that
// names an action this package does not know does not decode.
type Action string

const (
	// Read reads a file or lists a directory (file: resources).
	Read Action = "read"
	// Write creates a file or changes its contents (file: resources).
	Write Action = "write"
	// Delete removes a file or a directory (file: resources).
	Delete Action = "delete"
	// Exec runs a program (exec: resources).
	Exec Action = "exec"
	// Connect opens a connection to a host (net: resources).
	Connect Action = "connect"
)

// actionSet is a set of actions as bits, in this order on the wire.
type actionSet uint8

var actionNames = [...]Action{Read, Write, Delete, Exec, Connect}

const allActions = actionSet(1)<<len(actionNames) - 1

// kindActions are the actions that make sense on each kind of resource: minted claims
// may not grant others.
var kindActions = [...]actionSet{
	kindFile: 1<<0 | 1<<1 | 1<<2,
	kindExec: 1 << 3,
	kindNet:  1 << 4,
}

func actionBit(a Action) actionSet {
	if i := slices.Index(actionNames[:], a); i >= 0 {
		return 1 << i
	}
	return 0
}

func parseActions(as []Action) (actionSet, error) {
	var s actionSet
	for _, a := range as {
		b := actionBit(a)
		if b == 0 {
			return 0, fmt.Errorf("unknown action %q: want one of %s", a, allActions)
		}
		s |= b
	}
	return s, nil
}

func (s actionSet) list() []Action {
	l := make([]Action, 0, bits.OnesCount8(uint8(s)))
	for i, a := range actionNames {
		if s&(1<<i) != 0 {
			l = append(l, a)
		}
	}
	return l
}

func (s actionSet) String() string {
	var b strings.Builder
	for _, a := range s.list() {
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		b.WriteString(string(a))
	}
	return b.String()
}

// Audience is the verifier a token is for. The two hold different keys (see the package
// doc): an agent can verify, and so could mint, tokens for its own sandbox, and a
// control-plane verifier must not take those.
type Audience uint8

const (
	// ControlPlane tokens are verified by the control plane (the zero value of a Claims'
	// Audience means this).
	ControlPlane Audience = 1
	// Agent tokens are verified by the agent inside the subject's sandbox.
	Agent Audience = 2
)

func (a Audience) String() string {
	switch a {
	case ControlPlane:
		return "the control plane"
	case Agent:
		return "the agent"
	}
	return fmt.Sprintf("audience(%d)", uint8(a))
}

// Limits on a token's parts, so that a token stays small enough for a header and a
// verifier's work stays bounded.
const (
	// MaxTokenLen is the longest encoded token, in bytes.
	MaxTokenLen = 4096
	// MaxCaveats is the most caveats a token may carry.
	MaxCaveats = 32
	// MaxSubjectLen is the longest subject.
	MaxSubjectLen = 256
	// MaxExtensions is the most extensions one allowed_extensions list may hold.
	MaxExtensions = 32
	// MaxExtensionLen is the longest extension, dot included.
	MaxExtensionLen = 32
)

// Constraints narrow what a token's resource and actions allow. A zero field is no
// constraint.
type Constraints struct {
	// MaxSize is the largest Request.Size allowed, in bytes; 0 is no limit.
	MaxSize int64
	// AllowedExtensions, when not empty, limits the token to file: requests whose file
	// name ends in one of them (".ts", ".d.ts"); compared case-sensitively, as the
	// policy engine does.
	AllowedExtensions []string
	// NotBefore is the first moment the token is valid: kept to the second, rounded up.
	NotBefore time.Time
	// Expiry is the moment the token stops being valid: kept to the second, rounded
	// down. Minted claims must have one.
	Expiry time.Time
}

// Claims are what a token is minted with: who holds it, on what, to do what, within
// which constraints.
type Claims struct {
	// ID is the token's random 128-bit identity, 32 lower-case hex digits, for
	// revocation and the audit log. Mint assigns it; it must be empty when minting.
	ID string
	// KeyID is the root key the token is signed under. Mint assigns it (the keyring's
	// primary); it must be 0 when minting.
	KeyID uint32
	// Audience is who verifies the token; zero means ControlPlane.
	Audience Audience
	// Subject is who holds the token, "kind:id" ("sandbox:sb-abc", "user:u123"): a
	// request is allowed only when its Subject, which the verifier's caller takes from
	// the authenticated channel, is this.
	Subject string
	// Resource is what the token is about: file:/abs/path, exec:program, exec:*,
	// net:host, net:*.example.com.
	Resource string
	// Actions are the actions allowed on Resource, at least one, each one that makes
	// sense for its kind (read, write, delete for file:; exec; connect).
	Actions []Action
	// Constraints narrow what Resource and Actions allow.
	Constraints Constraints
}

// Caveat narrows a token: a request must satisfy it as well as the token's claims and
// every earlier caveat. A zero field leaves that part as it is; at least one must be set.
type Caveat struct {
	// Resource, when set, limits requests to this resource (a path under the token's,
	// say) — in the same grammar as Claims.Resource.
	Resource string
	// Actions, when set, limits requests to these actions.
	Actions []Action
	// Constraints, where set, add limits.
	Constraints Constraints
}

// scope is the form claims and caveats take in a token and in checks: the minted claims
// are the first scope, each caveat one more. A zero field is not set.
type scope struct {
	res       resource
	actions   actionSet
	maxSize   int64
	exts      []string // sorted, without duplicates
	notBefore int64    // Unix seconds
	expiry    int64    // Unix seconds
}

// newScope parses the fields of claims or a caveat; check then says whether they make one.
func newScope(res string, actions []Action, c Constraints) (scope, error) {
	var s scope
	var err error
	if res != "" {
		if s.res, err = parseResource(res, true); err != nil {
			return s, fmt.Errorf("resource %w", err)
		}
	}
	if s.actions, err = parseActions(actions); err != nil {
		return s, fmt.Errorf("actions: %w", err)
	}
	if c.MaxSize < 0 {
		return s, fmt.Errorf("constraints.max_size %d is negative", c.MaxSize)
	}
	s.maxSize = c.MaxSize
	if len(c.AllowedExtensions) > 0 {
		s.exts = slices.Compact(slices.Sorted(slices.Values(c.AllowedExtensions)))
	}
	if !c.NotBefore.IsZero() {
		s.notBefore = c.NotBefore.Unix()
		if c.NotBefore.Nanosecond() != 0 {
			s.notBefore++
		}
	}
	if !c.Expiry.IsZero() {
		s.expiry = c.Expiry.Unix()
	}
	return s, nil
}

// check is what every scope must satisfy, in a token being made and in one decoded.
// claims is true for the minted claims, which must name a resource, actions that suit it
// and an expiry.
func (s *scope) check(claims bool) error {
	switch {
	case claims && s.res.kind == 0:
		return errors.New("no resource")
	case claims && s.actions == 0:
		return errors.New("no action")
	case claims && s.actions&^kindActions[s.res.kind] != 0:
		return fmt.Errorf("actions %s do not apply to %s: %s takes %s", s.actions, s.res, schemes[s.res.kind],
			kindActions[s.res.kind])
	case claims && s.expiry == 0:
		return errors.New("no constraints.expiry: a token must expire")
	case claims && len(s.exts) > 0 && s.res.kind != kindFile:
		return errors.New("constraints.allowed_extensions apply to file: resources only")
	case !claims && s.empty():
		return errors.New("sets nothing: a caveat narrows at least one of resource, actions, max_size, allowed_extensions, not_before, expiry")
	case s.actions&^allActions != 0:
		return fmt.Errorf("unknown action bits %#x", uint8(s.actions&^allActions))
	case len(s.exts) > MaxExtensions:
		return fmt.Errorf("constraints.allowed_extensions has %d entries, over %d", len(s.exts), MaxExtensions)
	case s.notBefore < 0 || s.expiry < 0:
		return errors.New("constraints: a time before 1970")
	case s.notBefore != 0 && s.expiry != 0 && s.notBefore >= s.expiry:
		return fmt.Errorf("constraints.not_before %s is not before constraints.expiry %s", unixTime(s.notBefore), unixTime(s.expiry))
	}
	for i, e := range s.exts {
		if err := checkExtension(e); err != nil {
			return fmt.Errorf("constraints.allowed_extensions: %q %w", e, err)
		}
		if i > 0 && s.exts[i-1] >= e {
			return errors.New("constraints.allowed_extensions not sorted and distinct")
		}
	}
	return nil
}

func (s *scope) empty() bool {
	return s.res.kind == 0 && s.actions == 0 && s.maxSize == 0 && len(s.exts) == 0 && s.notBefore == 0 && s.expiry == 0
}

// checkExtension allows what the policy engine's allowed_extensions does: a dot, then
// at least one byte, no '/', glob character, space or control character.
func checkExtension(e string) error {
	switch {
	case !strings.HasPrefix(e, "."):
		return errors.New(`must start with a dot, like ".ts"`)
	case len(e) < 2:
		return errors.New("is only a dot")
	case len(e) > MaxExtensionLen:
		return fmt.Errorf("is over %d bytes", MaxExtensionLen)
	case strings.ContainsAny(e, "/*?[\\"):
		return errors.New("must be a plain extension: no /, no glob characters")
	case strings.IndexFunc(e, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0:
		return errors.New("holds a space or control character")
	}
	return nil
}

// checkSubject allows "kind:id": a kind of lower-case letters, then printable ASCII
// without spaces.
func checkSubject(s string) error {
	kind, id, ok := strings.Cut(s, ":")
	switch {
	case s == "":
		return errors.New("empty subject")
	case len(s) > MaxSubjectLen:
		return fmt.Errorf("subject is %d bytes, over %d", len(s), MaxSubjectLen)
	case !ok || kind == "" || id == "" || strings.Trim(kind, "abcdefghijklmnopqrstuvwxyz") != "":
		return fmt.Errorf("subject %s: want kind:id, like sandbox:sb-abc or user:u123", quote(s))
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] >= 0x7f {
			return fmt.Errorf("subject %s: holds a space, a control character or a byte that is not ASCII", quote(s))
		}
	}
	return nil
}

func unixTime(s int64) string { return time.Unix(s, 0).UTC().Format(time.RFC3339) }

func (s *scope) constraints() Constraints {
	c := Constraints{MaxSize: s.maxSize, AllowedExtensions: slices.Clone(s.exts)}
	if s.notBefore != 0 {
		c.NotBefore = time.Unix(s.notBefore, 0).UTC()
	}
	if s.expiry != 0 {
		c.Expiry = time.Unix(s.expiry, 0).UTC()
	}
	return c
}

func (s *scope) caveat() Caveat {
	c := Caveat{Resource: s.res.String(), Constraints: s.constraints()}
	if s.actions != 0 {
		c.Actions = s.actions.list()
	}
	return c
}
