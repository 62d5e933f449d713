package capability

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// Token is a minted token: its claims, and its encoding for the wire. It prints and logs
// as its ID and claims, never its encoding: the encoding is the credential.
type Token struct {
	// Claims are the token's claims as encoded: canonical resource, actions in order,
	// times to the second, ID and KeyID set.
	Claims Claims

	encoded string
}

// Encoded is the token's wire form, "pdk1." and base64url: hand it to its holder.
func (t Token) Encoded() string { return t.encoded }

// String describes the token without its signature:
// "capability 0f3c… for sandbox:sb-abc: write file:/workspace/src until 2026-09-01T12:00:00Z".
func (t Token) String() string {
	c := &t.Claims
	acts := make([]string, len(c.Actions))
	for i, a := range c.Actions {
		acts[i] = string(a)
	}
	return fmt.Sprintf("capability %s for %s: %s %s until %s", c.ID, c.Subject, strings.Join(acts, ","), c.Resource,
		c.Constraints.Expiry.UTC().Format(time.RFC3339))
}

// GoString keeps %#v from printing the encoding.
func (t Token) GoString() string { return t.String() }

// Format makes every fmt verb print the description.
func (t Token) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(t.String())) }

// LogValue logs the token's ID, subject and resource.
func (t Token) LogValue() slog.Value {
	return slog.GroupValue(slog.String("id", t.Claims.ID), slog.String("subject", t.Claims.Subject),
		slog.String("resource", t.Claims.Resource))
}

// Minter mints tokens under a keyring's primary key. It is safe for concurrent use.
type Minter struct {
	keys   *Keyring
	randID func([]byte) // fills a new token's ID; crypto/rand, but in tests
}

// NewMinter returns a minter that signs with keys' primary key. With an agent's
// keyring it mints only Agent tokens of that agent's subject.
func NewMinter(keys *Keyring) *Minter {
	return &Minter{keys: keys, randID: func(b []byte) { _, _ = rand.Read(b) }} // crypto/rand.Read never fails (Go 1.24+)
}

// Mint makes a token of c, with a fresh random ID. It refuses (errdefs.ErrInvalidArgument,
// naming the field) claims that are incomplete or malformed: a resource, at least one
// action that suits it and an expiry are required.
func (m *Minter) Mint(c Claims) (Token, error) {
	t, err := m.claims(c)
	if err != nil {
		return Token{}, fmt.Errorf("mint capability: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	m.randID(t.id[:])
	key, kerr := m.keys.signingKey(t.keyID, t.audience, t.subject)
	if kerr != nil {
		return Token{}, kerr // not reached: claims checked what the keyring can sign
	}
	t.sig = sign(key[:], [][]byte{t.claimsPayload(nil)})
	enc := t.encode()
	if len(enc) > MaxTokenLen {
		return Token{}, fmt.Errorf("mint capability: the token would be %d bytes, over %d: %w", len(enc), MaxTokenLen, errdefs.ErrInvalidArgument)
	}
	return Token{Claims: t.claims(), encoded: enc}, nil
}

func (m *Minter) claims(c Claims) (*token, error) {
	switch {
	case c.ID != "":
		return nil, fmt.Errorf("ID %q is set: Mint assigns it", c.ID)
	case c.KeyID != 0:
		return nil, fmt.Errorf("KeyID %d is set: Mint assigns it", c.KeyID)
	case c.Audience != 0 && c.Audience != ControlPlane && c.Audience != Agent:
		return nil, fmt.Errorf("unknown audience %d", uint8(c.Audience))
	}
	if err := checkSubject(c.Subject); err != nil {
		return nil, err
	}
	s, err := newScope(c.Resource, c.Actions, c.Constraints)
	if err != nil {
		return nil, err
	}
	if err := s.check(true); err != nil {
		return nil, err
	}
	t := &token{audience: c.Audience, keyID: m.keys.primary, subject: c.Subject, scopes: []scope{s}}
	if t.audience == 0 {
		t.audience = ControlPlane
	}
	if t.audience == Agent && m.keys.agent == "" {
		// An agent holds the keys derived from the keyring as it was when its sandbox
		// started: after a rotation, the running ones lack the new primary. The oldest key
		// is held by every agent started since it was added, so a rotation leaves running
		// sandboxes working; dropping a key (after a leak) stops those that hold none of
		// the remaining ones, which must then be restarted.
		t.keyID = m.keys.Oldest()
	}
	if m.keys.agent != "" && (t.audience != Agent || t.subject != m.keys.agent) {
		return nil, fmt.Errorf("an agent's keyring mints only Agent tokens of %s", m.keys.agent)
	}
	return t, nil
}

// Reissue mints for audience aud a token with d's claims and every one of d's caveats, in
// order, expiring at until if that is earlier than the claims' expiry: the same grant,
// never wider, checked by another verifier. d is what Verify or Admit returned for a
// token this minter's keyring signed. The control plane reissues a request's token for
// the agent, which then checks it against what the request really touches.
func (m *Minter) Reissue(d Decision, aud Audience, until time.Time) (string, error) {
	c := d.Claims
	c.ID, c.KeyID, c.Audience = "", 0, aud
	if !until.IsZero() && until.Before(c.Constraints.Expiry) {
		c.Constraints.Expiry = until
	}
	t, err := m.Mint(c)
	if err != nil {
		return "", err
	}
	enc := t.encoded
	for _, cv := range d.Caveats {
		if enc, err = Attenuate(enc, cv); err != nil {
			return "", err
		}
	}
	return enc, nil
}

// claims is t's minted claims in the exported form.
func (t *token) claims() Claims {
	s := &t.scopes[0]
	return Claims{ID: t.idString(), KeyID: t.keyID, Audience: t.audience, Subject: t.subject,
		Resource: s.res.String(), Actions: s.actions.list(), Constraints: s.constraints()}
}

// Attenuate appends c to token and returns the narrower token. It needs no key: the
// next link of the signature chain is keyed with the current signature, which the token
// carries. It does not check that c is narrower than the token — a caveat cannot widen
// whatever it says, and one that does not narrow changes nothing or leaves a token that
// allows nothing — nor that token's signature is good (Verify does).
//
// Errors: a malformed token or caveat (errdefs.ErrInvalidArgument), or a token that
// already has MaxCaveats caveats or would grow over MaxTokenLen (errdefs.ErrLimitExceeded).
func Attenuate(token string, c Caveat) (string, error) {
	t, err := decode(token)
	if err != nil {
		return "", err
	}
	s, err := newScope(c.Resource, c.Actions, c.Constraints)
	if err == nil {
		err = s.check(false)
	}
	if err != nil {
		return "", fmt.Errorf("capability caveat: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	if n := len(t.scopes) - 1; n >= MaxCaveats {
		return "", fmt.Errorf("capability %s already has %d caveats, the most a token may carry: %w", t.idString(), n, errdefs.ErrLimitExceeded)
	}
	t.scopes = append(t.scopes, s)
	t.sig = mac(t.sig[:], caveatPayload(nil, &t.scopes[len(t.scopes)-1]))
	enc := t.encode()
	if len(enc) > MaxTokenLen {
		return "", fmt.Errorf("capability %s: with the caveat the token would be %d bytes, over %d: %w", t.idString(), len(enc), MaxTokenLen, errdefs.ErrLimitExceeded)
	}
	return enc, nil
}

// RevocationList says whether a token ID is revoked. Verify asks it for every token
// whose signature is good; an error refuses the token (fail closed).
type RevocationList interface {
	Revoked(ctx context.Context, id string) (bool, error)
}

// Request is what a token is asked to allow.
type Request struct {
	// Subject is who asks: taken from the channel the request arrived on (the sandbox's
	// socket, the user's session), never from the request's own fields.
	Subject string
	// Resource is the one concrete resource acted on: file:/resolved/absolute/path (the
	// caller resolves symlinks; ".." is refused), exec:program-base-name, net:host.
	Resource string
	// Action is what is done to it.
	Action Action
	// Size is the bytes involved — a file's size after a write, the bytes read — checked
	// against every max_size; 0 when none.
	Size int64
	// Now is the time the token is judged at; zero means time.Now().
	Now time.Time
}

// Decision is an allowed request's token: what it was minted with and every caveat, for
// the audit log.
type Decision struct {
	// Claims are the token's minted claims, ID and KeyID included.
	Claims Claims
	// Caveats are the token's caveats in the order they were appended.
	Caveats []Caveat
}

// Verifier checks tokens and the requests made under them. It is safe for concurrent use.
type Verifier struct {
	keys    *Keyring
	revoked RevocationList
}

// NewVerifier returns a verifier of tokens signed under keys: with the control plane's
// keyring it takes ControlPlane tokens of any subject; with an agent's keyring
// ([Keyring.ForAgent]), Agent tokens of that agent's subject. revoked nil is an empty
// in-memory list.
func NewVerifier(keys *Keyring, revoked RevocationList) *Verifier {
	if revoked == nil {
		revoked = NewMemoryRevocationList()
	}
	return &Verifier{keys: keys, revoked: revoked}
}

// Verify allows req under token, or returns an [*Error] that says why not: a malformed
// token or request, an unknown key ID, a bad signature, the wrong audience, a revoked ID,
// another subject, or — from the minted claims or any caveat — a time outside the
// validity window, a resource outside the granted one, an action not allowed, a size over
// the maximum, or a file extension not allowed. Every caveat must allow the request.
func (v *Verifier) Verify(ctx context.Context, token string, req Request) (Decision, error) {
	r, err := req.parse()
	if err != nil {
		return Decision{}, err
	}
	t, err := v.authenticate(token)
	if err != nil {
		return Decision{}, err
	}
	id := t.idString()
	if err := v.admit(ctx, t, id, req.Subject); err != nil {
		return Decision{}, err
	}
	now := req.Now
	if now.IsZero() {
		now = time.Now()
	}
	if err := t.allows(id, r, now.Unix()); err != nil {
		return Decision{}, err
	}
	return t.decision(), nil
}

// Admit checks everything about token that does not depend on a request: its signature,
// its audience, that it is not revoked, that it is subject's, and that now is within every
// validity window. A caller that takes tokens as credentials admits one when the request
// arrives, before it knows what the request will touch, and then verifies each thing it
// touches with Verify. now zero means time.Now().
func (v *Verifier) Admit(ctx context.Context, token, subject string, now time.Time) (Decision, error) {
	if subject == "" {
		return Decision{}, badRequest("no subject")
	}
	t, err := v.authenticate(token)
	if err != nil {
		return Decision{}, err
	}
	id := t.idString()
	if err := v.admit(ctx, t, id, subject); err != nil {
		return Decision{}, err
	}
	if now.IsZero() {
		now = time.Now()
	}
	if err := t.valid(id, now.Unix()); err != nil {
		return Decision{}, err
	}
	return t.decision(), nil
}

// admit refuses a revoked token and another subject's.
func (v *Verifier) admit(ctx context.Context, t *token, id, subject string) error {
	revoked, rerr := v.revoked.Revoked(ctx, id)
	switch {
	case rerr != nil:
		return &Error{Reason: ReasonRevocationCheck, Caveat: -1, kind: errdefs.ErrUnavailable, cause: rerr,
			msg: "capability " + id + ": the revocation list could not be checked: " + rerr.Error()}
	case revoked:
		return denied(ReasonRevoked, id, -1, "revoked")
	case subject != t.subject:
		return denied(ReasonSubject, id, -1, "minted for %s, not %s", t.subject, quote(subject))
	}
	return nil
}

func (t *token) decision() Decision {
	d := Decision{Claims: t.claims(), Caveats: make([]Caveat, 0, len(t.scopes)-1)}
	for i := range t.scopes[1:] {
		d.Caveats = append(d.Caveats, t.scopes[1+i].caveat())
	}
	return d
}

// authenticate decodes token and checks its signature chain, in constant time.
func (v *Verifier) authenticate(token string) (*token, error) {
	t, err := decode(token)
	if err != nil {
		return nil, err
	}
	if v.keys.agent == "" && t.audience != ControlPlane {
		return nil, denied(ReasonAudience, "", -1, "the token is for %s, not the control plane", t.audience)
	}
	key, kerr := v.keys.signingKey(t.keyID, t.audience, t.subject)
	if kerr != nil {
		return nil, kerr
	}
	want := sign(key[:], t.payloads)
	if !hmac.Equal(want[:], t.sig[:]) {
		return nil, denied(ReasonBadSignature, "", -1, "bad signature: not minted under key %d, or changed since", t.keyID)
	}
	return t, nil
}

// request is a Request's parsed form.
type request struct {
	res    resource
	action actionSet
	size   int64
}

func (req *Request) parse() (request, error) {
	var r request
	var err error
	if req.Subject == "" {
		return r, badRequest("no subject")
	}
	if r.res, err = parseResource(req.Resource, false); err != nil {
		return r, badRequest("resource %v", err)
	}
	if r.action = actionBit(req.Action); r.action == 0 {
		return r, badRequest("unknown action %q: want one of %s", req.Action, allActions)
	}
	if req.Size < 0 {
		return r, badRequest("size %d is negative", req.Size)
	}
	r.size = req.Size
	return r, nil
}

// allows applies every scope to r, one check at a time across all scopes, so that the
// more basic refusal is the one reported (an expired token, rather than its resource).
func (t *token) allows(id string, r request, now int64) error {
	if err := t.valid(id, now); err != nil {
		return err
	}
	for i := range t.scopes {
		if s := &t.scopes[i]; s.res.kind != 0 && !s.res.covers(r.res) {
			return denied(ReasonResource, id, i, "resource %s outside %s", quote(r.res.String()), quote(s.res.String()))
		}
	}
	for i := range t.scopes {
		if s := &t.scopes[i]; s.actions != 0 && s.actions&r.action == 0 {
			return denied(ReasonAction, id, i, "action %s not allowed (allowed: %s)", r.action, s.actions)
		}
	}
	for i := range t.scopes {
		if s := &t.scopes[i]; s.maxSize != 0 && r.size > s.maxSize {
			return denied(ReasonSize, id, i, "size %d over max %d", r.size, s.maxSize)
		}
	}
	for i := range t.scopes {
		if s := &t.scopes[i]; len(s.exts) > 0 {
			if err := extensionAllowed(r.res, s.exts); err != "" {
				return denied(ReasonExtension, id, i, "%s (allowed: %s)", err, strings.Join(s.exts, " "))
			}
		}
	}
	return nil
}

// valid refuses a token outside any scope's validity window at now.
func (t *token) valid(id string, now int64) error {
	for i := range t.scopes {
		s := &t.scopes[i]
		if s.notBefore != 0 && now < s.notBefore {
			return denied(ReasonNotYetValid, id, i, "not valid before %s", unixTime(s.notBefore))
		}
		if s.expiry != 0 && now >= s.expiry {
			return denied(ReasonExpired, id, i, "expired at %s", unixTime(s.expiry))
		}
	}
	return nil
}

// extensionAllowed says why r's name does not end in one of exts, or "".
func extensionAllowed(r resource, exts []string) string {
	if r.kind != kindFile {
		return quote(r.String()) + " is not a file"
	}
	base := r.v[strings.LastIndexByte(r.v, '/')+1:]
	if slices.ContainsFunc(exts, func(e string) bool { return strings.HasSuffix(base, e) }) {
		return ""
	}
	dot := strings.LastIndexByte(base, '.')
	if dot <= 0 {
		return "file name " + quote(base) + " has no extension"
	}
	return "extension " + quote(base[dot:]) + " not allowed"
}
