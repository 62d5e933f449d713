package capability

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/errdefs"
)

var base64RawURL = base64.RawURLEncoding

var t0 = time.Date(2026, 9, 1, 12, 0, 0, 0, time.UTC)

func testKey(b byte) RootKey { return RootKey{bytes.Repeat([]byte{b}, 32)} }

func testKeyring(t testing.TB) *Keyring {
	t.Helper()
	k, err := NewKeyring(1, map[uint32]RootKey{1: testKey(1)})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// srcClaims is the seed's example: write .ts/.tsx/.css under /workspace/src, up to 100 MB.
func srcClaims() Claims {
	return Claims{
		Subject:  "sandbox:sb-abc",
		Resource: "file:/workspace/src",
		Actions:  []Action{Read, Write},
		Constraints: Constraints{
			MaxSize:           100 << 20,
			AllowedExtensions: []string{".ts", ".tsx", ".css"},
			NotBefore:         t0.Add(-time.Hour),
			Expiry:            t0.Add(time.Hour),
		},
	}
}

func mint(t testing.TB, m *Minter, c Claims) Token {
	t.Helper()
	tok, err := m.Mint(c)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func attenuate(t testing.TB, tok string, cs ...Caveat) string {
	t.Helper()
	for _, c := range cs {
		var err error
		if tok, err = Attenuate(tok, c); err != nil {
			t.Fatal(err)
		}
	}
	return tok
}

// req is a request by sb-abc at t0.
func req(resource string, a Action, size int64) Request {
	return Request{Subject: "sandbox:sb-abc", Resource: resource, Action: a, Size: size, Now: t0}
}

// wantRefusal checks that err is an *Error with reason r from part caveat, matching
// kind and holding msg.
func wantRefusal(t *testing.T, err error, r Reason, caveat int, kind error, msg string) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("err %v (%T), want an *Error %s", err, err, r)
	}
	if e.Reason != r || e.Caveat != caveat || !errors.Is(err, kind) || !strings.Contains(err.Error(), msg) {
		t.Fatalf("err %q (reason %s, caveat %d), want reason %s, caveat %d, %v, containing %q",
			err, e.Reason, e.Caveat, r, caveat, kind, msg)
	}
}

func TestMintVerifyRoundTrip(t *testing.T) {
	keys := testKeyring(t)
	c := srcClaims()
	c.Resource = "file:/workspace//./src/"
	c.Constraints.AllowedExtensions = []string{".tsx", ".ts", ".css", ".ts"}
	c.Constraints.NotBefore = t0.Add(-time.Hour + time.Millisecond)
	c.Constraints.Expiry = t0.Add(time.Hour + 999*time.Millisecond)
	tok := mint(t, NewMinter(keys), c)

	got := tok.Claims
	if !isTokenID(got.ID) || got.KeyID != 1 || got.Audience != ControlPlane || got.Resource != "file:/workspace/src" ||
		!slices.Equal(got.Constraints.AllowedExtensions, []string{".css", ".ts", ".tsx"}) ||
		!got.Constraints.NotBefore.Equal(t0.Add(-time.Hour+time.Second)) || !got.Constraints.Expiry.Equal(t0.Add(time.Hour)) {
		t.Fatalf("claims not canonical: %+v", got)
	}
	if !strings.HasPrefix(tok.Encoded(), "pdk1.") || len(tok.Encoded()) > 200 {
		t.Fatalf("encoded %q", tok.Encoded())
	}
	if other := mint(t, NewMinter(keys), c); other.Claims.ID == got.ID || other.Encoded() == tok.Encoded() {
		t.Fatal("two mints gave the same ID")
	}

	v := NewVerifier(keys, nil)
	for _, r := range []Request{
		req("file:/workspace/src/a.ts", Write, 10),
		req("file:/workspace/src/ui/deep/b.tsx", Read, 100<<20),
		req("file:/workspace/src//x/./ok.css", Read, 0),
		{Subject: "sandbox:sb-abc", Resource: "file:/workspace/src/a.ts", Action: Read, Now: t0.Add(-time.Hour + time.Second)},
		{Subject: "sandbox:sb-abc", Resource: "file:/workspace/src/a.ts", Action: Read, Now: t0.Add(time.Hour - time.Nanosecond)},
	} {
		d, err := v.Verify(context.Background(), tok.Encoded(), r)
		if err != nil {
			t.Fatalf("%+v: %v", r, err)
		}
		if fmt.Sprint(d.Claims) != fmt.Sprint(got) || len(d.Caveats) != 0 {
			t.Fatalf("decision %+v, want claims %+v", d, got)
		}
	}

	att := attenuate(t, tok.Encoded(), Caveat{Resource: "file:/workspace/src/ui"}, Caveat{Actions: []Action{Read}})
	d, err := v.Verify(context.Background(), att, req("file:/workspace/src/ui/a.ts", Read, 1))
	if err != nil {
		t.Fatal(err)
	}
	if d.Claims.ID != got.ID || len(d.Caveats) != 2 || d.Caveats[0].Resource != "file:/workspace/src/ui" ||
		!slices.Equal(d.Caveats[1].Actions, []Action{Read}) {
		t.Fatalf("decision %+v", d)
	}
}

func TestOtherKinds(t *testing.T) {
	keys := testKeyring(t)
	m, v := NewMinter(keys), NewVerifier(keys, nil)
	exp := Constraints{Expiry: t0.Add(time.Minute)}
	tests := []struct {
		grant  string
		action Action
		allow  []string
		refuse []string
	}{
		{"exec:*", Exec, []string{"exec:node", "exec:go", "exec:g++"}, []string{"file:/bin/node", "net:node"}},
		{"exec:node", Exec, []string{"exec:node"}, []string{"exec:nodejs", "exec:nod", "exec:Node"}},
		{"net:registry.npmjs.org", Connect, []string{"net:registry.npmjs.org", "net:Registry.NPMJS.org."},
			[]string{"net:npmjs.org", "net:x.registry.npmjs.org", "net:registry.npmjs.org.evil.com"}},
		{"net:*.example.com", Connect, []string{"net:a.example.com", "net:a.b.example.com"},
			[]string{"net:example.com", "net:badexample.com", "net:a.example.com.evil", "net:10.0.0.1"}},
		{"net:[::1]", Connect, []string{"net:[::1]", "net:::1", "net:[0:0::1]"}, []string{"net:127.0.0.1", "net:localhost"}},
		{"net:10.0.0.1", Connect, []string{"net:10.0.0.1", "net:::ffff:10.0.0.1"}, []string{"net:10.0.0.2"}},
		{"file:/", Delete, []string{"file:/", "file:/etc/passwd"}, []string{"exec:rm"}},
	}
	for _, tt := range tests {
		t.Run(tt.grant, func(t *testing.T) {
			tok := mint(t, m, Claims{Subject: "sandbox:sb-abc", Resource: tt.grant, Actions: []Action{tt.action}, Constraints: exp})
			for _, r := range tt.allow {
				if _, err := v.Verify(context.Background(), tok.Encoded(), req(r, tt.action, 0)); err != nil {
					t.Errorf("%s: %v", r, err)
				}
			}
			for _, r := range tt.refuse {
				_, err := v.Verify(context.Background(), tok.Encoded(), req(r, tt.action, 0))
				wantRefusal(t, err, ReasonResource, 0, errdefs.ErrPermissionDenied, "outside "+tt.grant)
			}
		})
	}
}

// failingList is a revocation list whose store is down.
type failingList struct{}

func (failingList) Revoked(context.Context, string) (bool, error) {
	return false, fmt.Errorf("revocations table: %w", errdefs.ErrUnavailable)
}

func TestRefusals(t *testing.T) {
	keys := testKeyring(t)
	m := NewMinter(keys)
	tok := mint(t, m, srcClaims()).Encoded()
	revoked := mint(t, m, srcClaims())
	list := NewMemoryRevocationList()
	if err := list.Revoke(revoked.Claims.ID); err != nil {
		t.Fatal(err)
	}
	other, _ := NewKeyring(7, map[uint32]RootKey{7: testKey(7)})
	underKey7 := mint(t, NewMinter(other), srcClaims()).Encoded()
	otherKey1, _ := NewKeyring(1, map[uint32]RootKey{1: testKey(9)})
	forged := mint(t, NewMinter(otherKey1), srcClaims()).Encoded()
	agentTok := mint(t, m, Claims{Audience: Agent, Subject: "sandbox:sb-abc", Resource: "exec:*", Actions: []Action{Exec},
		Constraints: Constraints{Expiry: t0.Add(time.Hour)}}).Encoded()
	narrowed := attenuate(t, tok, Caveat{Resource: "file:/workspace/src/ui"}, Caveat{Actions: []Action{Read}},
		Caveat{Constraints: Constraints{MaxSize: 10, AllowedExtensions: []string{".css"}}},
		Caveat{Constraints: Constraints{Expiry: t0.Add(-time.Minute)}})

	tests := []struct {
		name   string
		token  string
		req    Request
		list   RevocationList
		reason Reason
		caveat int
		kind   error
		msg    string
	}{
		{"bad signature", forged, req("file:/workspace/src/a.ts", Write, 1), nil,
			ReasonBadSignature, -1, errdefs.ErrPermissionDenied, "capability token: bad signature: not minted under key 1"},
		{"expired", tok, Request{Subject: "sandbox:sb-abc", Resource: "file:/workspace/src/a.ts", Action: Read, Now: t0.Add(time.Hour)}, nil,
			ReasonExpired, 0, errdefs.ErrPermissionDenied, "expired at 2026-09-01T13:00:00Z"},
		{"not yet valid", tok, Request{Subject: "sandbox:sb-abc", Resource: "file:/workspace/src/a.ts", Action: Read, Now: t0.Add(-time.Hour - time.Second)}, nil,
			ReasonNotYetValid, 0, errdefs.ErrPermissionDenied, "not valid before 2026-09-01T11:00:00Z"},
		{"resource sibling", tok, req("file:/workspace/srcx/a.ts", Write, 1), nil,
			ReasonResource, 0, errdefs.ErrPermissionDenied, "resource file:/workspace/srcx/a.ts outside file:/workspace/src"},
		{"resource parent", tok, req("file:/workspace", Read, 0), nil,
			ReasonResource, 0, errdefs.ErrPermissionDenied, "resource file:/workspace outside file:/workspace/src"},
		{"resource kind", tok, req("exec:node", Exec, 0), nil,
			ReasonResource, 0, errdefs.ErrPermissionDenied, "resource exec:node outside file:/workspace/src"},
		{"action", tok, req("file:/workspace/src/a.ts", Delete, 0), nil,
			ReasonAction, 0, errdefs.ErrPermissionDenied, "action delete not allowed (allowed: read, write)"},
		{"size", tok, req("file:/workspace/src/a.ts", Write, 100<<20+1), nil,
			ReasonSize, 0, errdefs.ErrPermissionDenied, "size 104857601 over max 104857600"},
		{"extension", tok, req("file:/workspace/src/setup.exe", Write, 1), nil,
			ReasonExtension, 0, errdefs.ErrPermissionDenied, "extension .exe not allowed (allowed: .css .ts .tsx)"},
		{"no extension", tok, req("file:/workspace/src/Makefile", Write, 1), nil,
			ReasonExtension, 0, errdefs.ErrPermissionDenied, "file name Makefile has no extension"},
		{"directory has no extension", tok, req("file:/workspace/src", Read, 0), nil,
			ReasonExtension, 0, errdefs.ErrPermissionDenied, "file name src has no extension"},
		{"revoked", revoked.Encoded(), req("file:/workspace/src/a.ts", Write, 1), list,
			ReasonRevoked, -1, errdefs.ErrPermissionDenied, "capability " + revoked.Claims.ID + ": revoked"},
		{"revocation list down", tok, req("file:/workspace/src/a.ts", Write, 1), failingList{},
			ReasonRevocationCheck, -1, errdefs.ErrUnavailable, "the revocation list could not be checked: revocations table"},
		{"unknown key ID", underKey7, req("file:/workspace/src/a.ts", Write, 1), nil,
			ReasonUnknownKey, -1, errdefs.ErrPermissionDenied, "unknown key ID 7 (this verifier holds [1])"},
		{"other subject", tok, Request{Subject: "sandbox:sb-xyz", Resource: "file:/workspace/src/a.ts", Action: Read, Now: t0}, nil,
			ReasonSubject, -1, errdefs.ErrPermissionDenied, "minted for sandbox:sb-abc, not sandbox:sb-xyz"},
		{"agent token at the control plane", agentTok, req("exec:go", Exec, 0), nil,
			ReasonAudience, -1, errdefs.ErrPermissionDenied, "the token is for the agent, not the control plane"},
		{"caveat resource", narrowed, Request{Subject: "sandbox:sb-abc", Resource: "file:/workspace/src/a.css", Action: Read, Now: t0.Add(-time.Hour)}, nil,
			ReasonResource, 1, errdefs.ErrPermissionDenied, "caveat 1: resource file:/workspace/src/a.css outside file:/workspace/src/ui"},
		{"caveat action", narrowed, Request{Subject: "sandbox:sb-abc", Resource: "file:/workspace/src/ui/a.css", Action: Write, Now: t0.Add(-time.Hour)}, nil,
			ReasonAction, 2, errdefs.ErrPermissionDenied, "caveat 2: action write not allowed (allowed: read)"},
		{"caveat size", narrowed, Request{Subject: "sandbox:sb-abc", Resource: "file:/workspace/src/ui/a.css", Action: Read, Size: 11, Now: t0.Add(-time.Hour)}, nil,
			ReasonSize, 3, errdefs.ErrPermissionDenied, "caveat 3: size 11 over max 10"},
		{"caveat extension", narrowed, Request{Subject: "sandbox:sb-abc", Resource: "file:/workspace/src/ui/a.ts", Action: Read, Now: t0.Add(-time.Hour)}, nil,
			ReasonExtension, 3, errdefs.ErrPermissionDenied, "caveat 3: extension .ts not allowed (allowed: .css)"},
		{"caveat expiry, reported first", narrowed, req("file:/workspace/src/a.exe", Delete, 1<<40), nil,
			ReasonExpired, 4, errdefs.ErrPermissionDenied, "caveat 4: expired at 2026-09-01T11:59:00Z"},
		{"malformed", "pdk1.AAAA", req("file:/workspace/src/a.ts", Write, 1), nil,
			ReasonMalformed, -1, errdefs.ErrInvalidArgument, "malformed capability token: 3 bytes, too short for a signature"},
		{"bad request: relative", tok, req("file:workspace/a.ts", Write, 1), nil,
			ReasonBadRequest, -1, errdefs.ErrInvalidArgument, "capability request: resource file:workspace/a.ts is not an absolute path"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewVerifier(keys, tt.list).Verify(context.Background(), tt.token, tt.req)
			wantRefusal(t, err, tt.reason, tt.caveat, tt.kind, tt.msg)
		})
	}
}

func TestRequestErrors(t *testing.T) {
	keys := testKeyring(t)
	tok := mint(t, NewMinter(keys), srcClaims()).Encoded()
	v := NewVerifier(keys, nil)
	for _, tt := range []struct {
		req Request
		msg string
	}{
		{req("file:/workspace/src/../../etc/passwd", Read, 0), "holds a .. segment"},
		{req("file:/workspace/src/..", Read, 0), "holds a .. segment"},
		{req("file:/workspace/src/a\x00.ts", Read, 0), `"file:/workspace/src/a\x00.ts" holds a NUL byte`},
		{req("file:", Read, 0), "has an empty path"},
		{req("/workspace/src/a.ts", Read, 0), "want file:/absolute/path, exec:program or net:host"},
		{req("exec:*", Exec, 0), "is a wildcard: a request names one program"},
		{req("exec:/usr/bin/node", Exec, 0), "holds a /: want a program's base name"},
		{req("net:*.example.com", Connect, 0), "is a wildcard: a request names one host"},
		{req("net:a.example.com:443", Connect, 0), `holds ':'`},
		{req("net:127.1", Connect, 0), "numeric last label"},
		{req("net:[fe80::1%eth0]", Connect, 0), "is an address with a zone"},
		{req("net:[10.0.0.1]", Connect, 0), "brackets around something that is not an IPv6 address"},
		{req("file:/workspace/src/a.ts", "chmod", 0), `unknown action "chmod": want one of read, write, delete, exec, connect`},
		{req("file:/workspace/src/a.ts", Write, -1), "size -1 is negative"},
		{Request{Resource: "file:/workspace/src/a.ts", Action: Read}, "no subject"},
		{req("file:/"+strings.Repeat("a", MaxResourceLen), Read, 0), "bytes long, over 4101"},
	} {
		_, err := v.Verify(context.Background(), tok, tt.req)
		wantRefusal(t, err, ReasonBadRequest, -1, errdefs.ErrInvalidArgument, tt.msg)
	}
}

// TestCaveatsOnlyNarrow appends caveats that would widen each constraint if they
// replaced it: the earlier, narrower constraint still decides.
func TestCaveatsOnlyNarrow(t *testing.T) {
	keys := testKeyring(t)
	v := NewVerifier(keys, nil)
	base := mint(t, NewMinter(keys), srcClaims()).Encoded()
	narrow := attenuate(t, base,
		Caveat{Resource: "file:/workspace/src/ui"},
		Caveat{Actions: []Action{Read}},
		Caveat{Constraints: Constraints{MaxSize: 1000, AllowedExtensions: []string{".ts"}}},
		Caveat{Constraints: Constraints{Expiry: t0.Add(time.Minute), NotBefore: t0.Add(-time.Minute)}},
	)
	widen := Caveat{
		Resource:    "file:/",
		Actions:     []Action{Read, Write, Delete, Exec, Connect},
		Constraints: Constraints{MaxSize: 1 << 60, AllowedExtensions: []string{".exe", ".ts", ".css"}, NotBefore: t0.Add(-48 * time.Hour), Expiry: t0.Add(48 * time.Hour)},
	}
	widened := attenuate(t, narrow, widen, Caveat{Resource: "file:/workspace"}, Caveat{Actions: []Action{Read, Write}})
	for _, tok := range []string{narrow, attenuate(t, narrow, widen)} {
		if _, err := v.Verify(context.Background(), tok, req("file:/workspace/src/ui/a.ts", Read, 1000)); err != nil {
			t.Fatalf("the narrowed token refuses what it allows: %v", err)
		}
	}
	at := t0.Add
	for _, tt := range []struct {
		name   string
		req    Request
		reason Reason
		caveat int
	}{
		{"broader path", req("file:/workspace/src/a.ts", Read, 1), ReasonResource, 1},
		{"outside the minted path", req("file:/etc/passwd.ts", Read, 1), ReasonResource, 0},
		{"more actions", req("file:/workspace/src/ui/a.ts", Write, 1), ReasonAction, 2},
		{"an action the claims never had", req("file:/workspace/src/ui/a.ts", Delete, 1), ReasonAction, 0},
		{"bigger size", req("file:/workspace/src/ui/a.ts", Read, 1001), ReasonSize, 3},
		{"more extensions", req("file:/workspace/src/ui/a.css", Read, 1), ReasonExtension, 3},
		{"an extension the claims never had", req("file:/workspace/src/ui/a.exe", Read, 1), ReasonExtension, 0},
		{"later expiry", Request{Subject: "sandbox:sb-abc", Resource: "file:/workspace/src/ui/a.ts", Action: Read, Now: at(time.Minute)}, ReasonExpired, 4},
		{"earlier not_before", Request{Subject: "sandbox:sb-abc", Resource: "file:/workspace/src/ui/a.ts", Action: Read, Now: at(-2 * time.Minute)}, ReasonNotYetValid, 4},
		{"past the minted expiry", Request{Subject: "sandbox:sb-abc", Resource: "file:/workspace/src/ui/a.ts", Action: Read, Now: at(47 * time.Hour)}, ReasonExpired, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := v.Verify(context.Background(), widened, tt.req)
			wantRefusal(t, err, tt.reason, tt.caveat, errdefs.ErrPermissionDenied, "")
		})
	}
}

// resign re-encodes a token changed by edit, keeping the signature it had.
func resign(t *testing.T, tok string, edit func(*token)) string {
	t.Helper()
	d, err := decode(tok)
	if err != nil {
		t.Fatal(err)
	}
	edit(d)
	return d.encode()
}

func TestTamperingBreaksTheSignature(t *testing.T) {
	keys := testKeyring(t)
	v := NewVerifier(keys, nil)
	base := mint(t, NewMinter(keys), srcClaims()).Encoded()
	tok := attenuate(t, base, Caveat{Resource: "file:/workspace/src/ui"}, Caveat{Actions: []Action{Read}},
		Caveat{Constraints: Constraints{MaxSize: 10}})
	if _, err := v.Verify(context.Background(), tok, req("file:/workspace/src/ui/a.ts", Read, 1)); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		edit func(*token)
	}{
		{"remove the last caveat", func(d *token) { d.scopes = d.scopes[:3] }},
		{"remove the first caveat", func(d *token) { d.scopes = slices.Delete(d.scopes, 1, 2) }},
		{"remove every caveat", func(d *token) { d.scopes = d.scopes[:1] }},
		{"reorder caveats", func(d *token) { d.scopes[1], d.scopes[2] = d.scopes[2], d.scopes[1] }},
		{"widen a caveat's resource", func(d *token) { d.scopes[1].res.v = "/workspace/src" }},
		{"widen a caveat's actions", func(d *token) { d.scopes[2].actions |= 2 }},
		{"widen a caveat's size", func(d *token) { d.scopes[3].maxSize = 11 }},
		{"subject", func(d *token) { d.subject = "sandbox:sb-abd" }},
		{"resource", func(d *token) { d.scopes[0].res.v = "/workspace" }},
		{"actions", func(d *token) { d.scopes[0].actions |= 4 }},
		{"max_size", func(d *token) { d.scopes[0].maxSize++ }},
		{"no max_size", func(d *token) { d.scopes[0].maxSize = 0 }},
		{"extensions", func(d *token) { d.scopes[0].exts = append(d.scopes[0].exts, ".zz") }},
		{"no extensions", func(d *token) { d.scopes[0].exts = nil }},
		{"expiry", func(d *token) { d.scopes[0].expiry++ }},
		{"not_before", func(d *token) { d.scopes[0].notBefore-- }},
		{"ID", func(d *token) { d.id[15] ^= 1 }},
		{"signature", func(d *token) { d.sig[0] ^= 1 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bad := resign(t, tok, tt.edit)
			_, err := v.Verify(context.Background(), bad, req("file:/workspace/src/ui/a.ts", Read, 1))
			wantRefusal(t, err, ReasonBadSignature, -1, errdefs.ErrPermissionDenied, "bad signature")
		})
	}
	t.Run("the last caveat dropped with the signature before it is the earlier token", func(t *testing.T) {
		// That signature is what the holder of the earlier token had: it grants no more
		// than that token did.
		earlier := attenuate(t, base, Caveat{Resource: "file:/workspace/src/ui"}, Caveat{Actions: []Action{Read}})
		if got := resign(t, tok, func(d *token) { d.scopes = d.scopes[:3]; d.sig = mustDecode(t, earlier).sig }); got != earlier {
			t.Fatal("not the same token")
		}
	})
	t.Run("key ID", func(t *testing.T) {
		two, _ := keys.WithKey(2, testKey(2))
		_, err := NewVerifier(two, nil).Verify(context.Background(), resign(t, tok, func(d *token) { d.keyID = 2 }),
			req("file:/workspace/src/ui/a.ts", Read, 1))
		wantRefusal(t, err, ReasonBadSignature, -1, errdefs.ErrPermissionDenied, "not minted under key 2")
	})
	t.Run("audience", func(t *testing.T) {
		agent, _ := keys.ForAgent("sandbox:sb-abc")
		_, err := NewVerifier(agent, nil).Verify(context.Background(), resign(t, tok, func(d *token) { d.audience = Agent }),
			req("file:/workspace/src/ui/a.ts", Read, 1))
		wantRefusal(t, err, ReasonBadSignature, -1, errdefs.ErrPermissionDenied, "bad signature")
	})
}

func mustDecode(t *testing.T, s string) *token {
	t.Helper()
	d, err := decode(s)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestEveryByteMatters changes each byte of a token's body, and each character of its
// encoding, and expects a refusal every time.
func TestEveryByteMatters(t *testing.T) {
	keys := testKeyring(t)
	v := NewVerifier(keys, nil)
	tok := attenuate(t, mint(t, NewMinter(keys), srcClaims()).Encoded(), Caveat{Resource: "file:/workspace/src/ui"},
		Caveat{Constraints: Constraints{AllowedExtensions: []string{".ts"}}})
	r := req("file:/workspace/src/ui/a.ts", Read, 1)
	if _, err := v.Verify(context.Background(), tok, r); err != nil {
		t.Fatal(err)
	}
	body := mustBody(t, tok)
	for i := range body {
		for _, x := range []byte{0x01, 0x80, 0xff} {
			b := bytes.Clone(body)
			b[i] ^= x
			if _, err := v.Verify(context.Background(), encodeBody(b), r); err == nil {
				t.Fatalf("body byte %d ^ %#x verifies", i, x)
			}
		}
	}
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_=.+/\n"
	for i := range len(tok) {
		for _, c := range []byte(alphabet) {
			if tok[i] == c {
				continue
			}
			bad := tok[:i] + string(c) + tok[i+1:]
			if _, err := v.Verify(context.Background(), bad, r); err == nil {
				t.Fatalf("character %d as %q verifies", i, c)
			}
		}
	}
	for i := range len(tok) {
		if _, err := v.Verify(context.Background(), tok[:i], r); err == nil {
			t.Fatalf("the first %d characters verify", i)
		}
	}
	for _, extra := range []string{"A", "=", "\n", " ", "."} {
		if _, err := v.Verify(context.Background(), tok+extra, r); err == nil {
			t.Fatalf("the token with %q appended verifies", extra)
		}
	}
}

func TestRotation(t *testing.T) {
	one := testKeyring(t)
	old := mint(t, NewMinter(one), srcClaims())
	two, err := one.WithKey(2, testKey(2))
	if err != nil {
		t.Fatal(err)
	}
	if two.Primary() != 2 || fmt.Sprint(two.KeyIDs()) != "[1 2]" || one.Primary() != 1 {
		t.Fatalf("rotated keyring %v, the old one %v", two, one)
	}
	fresh := mint(t, NewMinter(two), srcClaims())
	if fresh.Claims.KeyID != 2 || old.Claims.KeyID != 1 {
		t.Fatalf("key IDs %d and %d", old.Claims.KeyID, fresh.Claims.KeyID)
	}
	r := req("file:/workspace/src/a.ts", Write, 1)
	for _, tok := range []Token{old, fresh} {
		if _, err := NewVerifier(two, nil).Verify(context.Background(), tok.Encoded(), r); err != nil {
			t.Fatalf("after rotation, key %d: %v", tok.Claims.KeyID, err)
		}
	}
	_, err = NewVerifier(one, nil).Verify(context.Background(), fresh.Encoded(), r)
	wantRefusal(t, err, ReasonUnknownKey, -1, errdefs.ErrPermissionDenied, "unknown key ID 2 (this verifier holds [1])")
	onlyTwo, _ := NewKeyring(2, map[uint32]RootKey{2: testKey(2)})
	_, err = NewVerifier(onlyTwo, nil).Verify(context.Background(), old.Encoded(), r)
	wantRefusal(t, err, ReasonUnknownKey, -1, errdefs.ErrPermissionDenied, "unknown key ID 1")

	if _, err := two.WithKey(2, testKey(3)); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Fatalf("reusing key ID 2: %v", err)
	}
}

func TestAgentKeyring(t *testing.T) {
	keys := testKeyring(t)
	m := NewMinter(keys)
	agent, err := keys.ForAgent("sandbox:sb-abc")
	if err != nil {
		t.Fatal(err)
	}
	otherAgent, _ := keys.ForAgent("sandbox:sb-xyz")
	if bytes.Equal(agent.keys[1], keys.keys[1]) || bytes.Equal(agent.keys[1], otherAgent.keys[1]) {
		t.Fatal("the agent's key is not derived per subject")
	}
	agentClaims := Claims{Audience: Agent, Subject: "sandbox:sb-abc", Resource: "exec:*", Actions: []Action{Exec},
		Constraints: Constraints{Expiry: t0.Add(time.Hour)}}
	forAgent := mint(t, m, agentClaims).Encoded()
	forCP := mint(t, m, srcClaims()).Encoded()
	run := req("exec:go", Exec, 0)

	if _, err := NewVerifier(agent, nil).Verify(context.Background(), forAgent, run); err != nil {
		t.Fatalf("the agent refuses its token: %v", err)
	}
	_, err = NewVerifier(agent, nil).Verify(context.Background(), forCP, req("file:/workspace/src/a.ts", Read, 0))
	wantRefusal(t, err, ReasonAudience, -1, errdefs.ErrPermissionDenied, "the token is for the control plane, not the agent")
	_, err = NewVerifier(otherAgent, nil).Verify(context.Background(), forAgent, run)
	wantRefusal(t, err, ReasonSubject, -1, errdefs.ErrPermissionDenied, "the token is for sandbox:sb-abc; this agent holds only the key of sandbox:sb-xyz")
	_, err = NewVerifier(keys, nil).Verify(context.Background(), forAgent, run)
	wantRefusal(t, err, ReasonAudience, -1, errdefs.ErrPermissionDenied, "not the control plane")

	// A sandbox that takes over its agent has the agent's keyring: what it mints, its own
	// agent takes, and the control plane does not, whatever audience it claims.
	self := mint(t, NewMinter(agent), Claims{Audience: Agent, Subject: "sandbox:sb-abc", Resource: "file:/", Actions: []Action{Write},
		Constraints: Constraints{Expiry: t0.Add(time.Hour)}}).Encoded()
	if _, err := NewVerifier(agent, nil).Verify(context.Background(), self, req("file:/x", Write, 0)); err != nil {
		t.Fatal(err)
	}
	asCP := resign(t, self, func(d *token) {
		d.audience = ControlPlane
		k := agent.keys[1]
		d.sig = sign(k, [][]byte{d.claimsPayload(nil)})
	})
	_, err = NewVerifier(keys, nil).Verify(context.Background(), asCP, req("file:/x", Write, 0))
	wantRefusal(t, err, ReasonBadSignature, -1, errdefs.ErrPermissionDenied, "bad signature")
	for _, c := range []Claims{srcClaims(), {Audience: Agent, Subject: "sandbox:sb-xyz", Resource: "exec:*", Actions: []Action{Exec},
		Constraints: Constraints{Expiry: t0}}} {
		if _, err := NewMinter(agent).Mint(c); !errors.Is(err, errdefs.ErrInvalidArgument) ||
			!strings.Contains(err.Error(), "an agent's keyring mints only Agent tokens of sandbox:sb-abc") {
			t.Fatalf("an agent minted %+v: %v", c, err)
		}
	}

	if again, err := agent.ForAgent("sandbox:sb-abc"); err != nil || again != agent {
		t.Fatalf("ForAgent of the same subject: %v %v", again, err)
	}
	if _, err := agent.ForAgent("sandbox:sb-xyz"); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("an agent derived another's keyring: %v", err)
	}
	if _, err := agent.WithKey(2, testKey(2)); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("an agent keyring rotated: %v", err)
	}
	if _, err := keys.ForAgent("sb-abc"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("ForAgent of a bad subject: %v", err)
	}
}

func TestRevocation(t *testing.T) {
	keys := testKeyring(t)
	list := NewMemoryRevocationList()
	v := NewVerifier(keys, list)
	tok := mint(t, NewMinter(keys), srcClaims())
	att := attenuate(t, tok.Encoded(), Caveat{Actions: []Action{Read}})
	r := req("file:/workspace/src/a.ts", Read, 1)
	for _, s := range []string{tok.Encoded(), att} {
		if _, err := v.Verify(context.Background(), s, r); err != nil {
			t.Fatal(err)
		}
	}
	if err := list.Revoke(tok.Claims.ID); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{tok.Encoded(), att} {
		_, err := v.Verify(context.Background(), s, r)
		wantRefusal(t, err, ReasonRevoked, -1, errdefs.ErrPermissionDenied, "revoked")
	}
	for _, id := range []string{"", "x", strings.ToUpper(tok.Claims.ID), tok.Claims.ID + "0"} {
		if err := list.Revoke(id); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Fatalf("Revoke(%q): %v", id, err)
		}
	}
}

func TestMintErrors(t *testing.T) {
	m := NewMinter(testKeyring(t))
	ok := srcClaims()
	with := func(f func(*Claims)) Claims { c := srcClaims(); f(&c); return c }
	tests := []struct {
		c   Claims
		msg string
	}{
		{with(func(c *Claims) { c.ID = "abc" }), `ID "abc" is set: Mint assigns it`},
		{with(func(c *Claims) { c.KeyID = 3 }), "KeyID 3 is set"},
		{with(func(c *Claims) { c.Audience = 9 }), "unknown audience 9"},
		{with(func(c *Claims) { c.Subject = "" }), "empty subject"},
		{with(func(c *Claims) { c.Subject = "sb-abc" }), "subject sb-abc: want kind:id"},
		{with(func(c *Claims) { c.Subject = "Sandbox:x" }), "want kind:id"},
		{with(func(c *Claims) { c.Subject = "sandbox:a b" }), "holds a space"},
		{with(func(c *Claims) { c.Subject = "user:" + strings.Repeat("u", MaxSubjectLen) }), "over 256"},
		{with(func(c *Claims) { c.Resource = "" }), "no resource"},
		{with(func(c *Claims) { c.Resource = "file:rel" }), "resource file:rel is not an absolute path"},
		{with(func(c *Claims) { c.Resource = "file:/a/../b" }), "holds a .. segment"},
		{with(func(c *Claims) { c.Resource = "http://x" }), "want file:/absolute/path"},
		{with(func(c *Claims) { c.Resource = "net:*" }), "is a bare *"},
		{with(func(c *Claims) { c.Resource = "net:a.*.com" }), "holds a * that is not the whole first label"},
		{with(func(c *Claims) { c.Resource = "net:*.10.0.0.1" }), "puts a wildcard on an address"},
		{with(func(c *Claims) { c.Resource = "net:bücher.de" }), "xn-- for others"},
		{with(func(c *Claims) { c.Resource = "exec:a b" }), "program names are letters"},
		{with(func(c *Claims) { c.Actions = nil }), "no action"},
		{with(func(c *Claims) { c.Actions = []Action{"admin"} }), `unknown action "admin"`},
		{with(func(c *Claims) { c.Actions = []Action{Write, Exec} }), "actions write, exec do not apply to file:/workspace/src: file: takes read, write, delete"},
		{with(func(c *Claims) { c.Constraints.MaxSize = -1 }), "max_size -1 is negative"},
		{with(func(c *Claims) { c.Constraints.AllowedExtensions = []string{"ts"} }), `"ts" must start with a dot`},
		{with(func(c *Claims) { c.Constraints.AllowedExtensions = []string{".t*"} }), "no glob characters"},
		{with(func(c *Claims) { c.Constraints.AllowedExtensions = []string{"." + strings.Repeat("x", 32)} }), "over 32 bytes"},
		{with(func(c *Claims) {
			c.Constraints.AllowedExtensions = nil
			for i := range 33 {
				c.Constraints.AllowedExtensions = append(c.Constraints.AllowedExtensions, fmt.Sprintf(".x%d", i))
			}
		}), "33 entries, over 32"},
		{with(func(c *Claims) { c.Constraints.Expiry = time.Time{} }), "no constraints.expiry: a token must expire"},
		{with(func(c *Claims) { c.Constraints.NotBefore = c.Constraints.Expiry }), "not before constraints.expiry"},
		{with(func(c *Claims) { c.Constraints.NotBefore = time.Unix(-5, 0) }), "a time before 1970"},
		{Claims{Subject: "sandbox:x", Resource: "exec:go", Actions: []Action{Exec}, Constraints: Constraints{
			Expiry: t0, AllowedExtensions: []string{".go"}}}, "allowed_extensions apply to file: resources only"},
		{with(func(c *Claims) { c.Resource = "file:/" + strings.Repeat("a/", 1500) }), "the token would be"},
	}
	for _, tt := range tests {
		_, err := m.Mint(tt.c)
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("Mint: %v, want %q", err, tt.msg)
		}
	}
	if _, err := m.Mint(ok); err != nil {
		t.Fatal(err)
	}
}

func TestAttenuateErrors(t *testing.T) {
	keys := testKeyring(t)
	tok := mint(t, NewMinter(keys), srcClaims()).Encoded()
	for _, tt := range []struct {
		tok  string
		c    Caveat
		kind error
		msg  string
	}{
		{"garbage", Caveat{Actions: []Action{Read}}, errdefs.ErrInvalidArgument, "not a paddock capability token"},
		{tok, Caveat{}, errdefs.ErrInvalidArgument, "sets nothing"},
		{tok, Caveat{Resource: "file:a"}, errdefs.ErrInvalidArgument, "not an absolute path"},
		{tok, Caveat{Actions: []Action{"fly"}}, errdefs.ErrInvalidArgument, `unknown action "fly"`},
		{tok, Caveat{Constraints: Constraints{NotBefore: t0, Expiry: t0}}, errdefs.ErrInvalidArgument, "is not before"},
		{tok, Caveat{Resource: "file:/" + strings.Repeat("a", 3500)}, errdefs.ErrLimitExceeded, "over 4096"},
	} {
		_, err := Attenuate(tt.tok, tt.c)
		if !errors.Is(err, tt.kind) || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("Attenuate(%+v): %v, want %v %q", tt.c, err, tt.kind, tt.msg)
		}
	}

	// MaxCaveats caveats verify; one more is refused, and a token that has one more
	// anyway (made by hand) is malformed.
	full := tok
	for i := range MaxCaveats {
		full = attenuate(t, full, Caveat{Constraints: Constraints{MaxSize: int64(1000 - i)}})
	}
	d, err := NewVerifier(keys, nil).Verify(context.Background(), full, req("file:/workspace/src/a.ts", Write, 1000-MaxCaveats+1))
	if err != nil || len(d.Caveats) != MaxCaveats {
		t.Fatalf("a token with %d caveats: %v", MaxCaveats, err)
	}
	if _, err := Attenuate(full, Caveat{Actions: []Action{Read}}); !errors.Is(err, errdefs.ErrLimitExceeded) ||
		!strings.Contains(err.Error(), "already has 32 caveats") {
		t.Fatalf("a 33rd caveat: %v", err)
	}
	over := mustDecode(t, full)
	over.scopes = append(over.scopes, scope{actions: 1})
	_, err = decode(over.encode())
	wantRefusal(t, err, ReasonMalformed, -1, errdefs.ErrInvalidArgument, "more than 32 caveats")
}

func TestMalformed(t *testing.T) {
	keys := testKeyring(t)
	tok := mint(t, NewMinter(keys), srcClaims()).Encoded()
	body := mustBody(t, tok)
	claimsLen := int(body[0])<<8 | int(body[1])
	patch := func(f func(b []byte) []byte) string { return encodeBody(f(bytes.Clone(body))) }
	tests := []struct{ name, tok, msg string }{
		{"empty", "", "not a paddock capability token (want the prefix pdk1.)"},
		{"JWT", "eyJhbGciOiJIUzI1NiJ9.e30.x", "not a paddock capability token"},
		{"future version", "pdk2." + tok[5:], "format pdk2 is not supported (this verifier reads pdk1)"},
		{"too long", "pdk1." + strings.Repeat("A", MaxTokenLen), "4101 bytes long, over 4096"},
		{"not base64url", "pdk1.ab+/", "not base64url without padding"},
		{"padding", tok + "==", "not base64url"},
		{"newline", tok[:20] + "\n" + tok[20:], "not in canonical form"},
		{"non-zero trailing bits", nonCanonicalTail(t, tok), "not base64url"},
		{"no records", encodeBody(make([]byte, sigSize)), "no claims"},
		{"record truncated", patch(func(b []byte) []byte { b[0] = 0xff; return b }), "record 0 is truncated"},
		{"trailing record bytes", patch(func(b []byte) []byte { return slices.Insert(b, len(b)-sigSize, 0) }), "record 1 is truncated"},
		{"claims version", patch(func(b []byte) []byte { b[2] = 2; return b }), "claims: format version 2 is not supported"},
		{"audience", patch(func(b []byte) []byte { b[3] = 7; return b }), "claims: unknown audience 7"},
		{"key ID 0", patch(func(b []byte) []byte { copy(b[4:8], []byte{0, 0, 0, 0}); return b }), "claims: key ID 0"},
		{"claims truncated", patch(func(b []byte) []byte {
			b[1]--
			return slices.Delete(b, 2+claimsLen-1, 2+claimsLen)
		}), "claims are truncated"},
		{"claims trailing bytes", patch(func(b []byte) []byte {
			b[1]++
			return slices.Insert(b, 2+claimsLen, 0)
		}), "claims: 1 bytes after the end"},
		{"unknown field", withScopeByte(t, tok, 0x40), "claims: unknown fields 0x40"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewVerifier(keys, nil).Verify(context.Background(), tt.tok, req("file:/workspace/src/a.ts", Write, 1))
			wantRefusal(t, err, ReasonMalformed, -1, errdefs.ErrInvalidArgument, tt.msg)
		})
	}

	// Structural errors in scopes, one per kind of field, built with the encoder.
	d := mustDecode(t, tok)
	for _, tt := range []struct {
		name string
		s    scope
		msg  string
	}{
		{"empty caveat", scope{}, "caveat 1: sets nothing"},
		{"unknown action bits", scope{actions: 0x40}, "caveat 1: unknown action bits 0x40"},
		{"unsorted extensions", scope{exts: []string{".b", ".a"}}, "not sorted and distinct"},
		{"bad extension", scope{exts: []string{"x"}}, "must start with a dot"},
		{"non-canonical resource", scope{res: resource{kindFile, "/a/"}}, "not in canonical form"},
		{"bad resource", scope{res: resource{kindFile, "a"}}, "caveat 1: resource file:a is not an absolute path"},
		{"times", scope{notBefore: 10, expiry: 5}, "is not before"},
		{"negative time", scope{expiry: -1}, "a time before 1970"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := *d
			c.scopes = append(slices.Clone(d.scopes), tt.s)
			_, err := decode(c.encode())
			wantRefusal(t, err, ReasonMalformed, -1, errdefs.ErrInvalidArgument, tt.msg)
		})
	}
	t.Run("unknown caveat kind", func(t *testing.T) {
		att := attenuate(t, tok, Caveat{Actions: []Action{Read}})
		b := mustBody(t, att)
		b[2+claimsLen+2] = 9
		_, err := decode(encodeBody(b))
		wantRefusal(t, err, ReasonMalformed, -1, errdefs.ErrInvalidArgument, "caveat 1: kind 9 is not supported")
	})
	t.Run("max_size over 2^63-1", func(t *testing.T) {
		att := attenuate(t, tok, Caveat{Constraints: Constraints{MaxSize: 5}})
		b := mustBody(t, att)
		b[2+claimsLen+2+2] = 0x80 // the first byte of max_size, after the kind and presence bytes
		_, err := decode(encodeBody(b))
		wantRefusal(t, err, ReasonMalformed, -1, errdefs.ErrInvalidArgument, "is over 2^63-1")
	})
	t.Run("a field present with a zero value", func(t *testing.T) {
		att := attenuate(t, tok, Caveat{Constraints: Constraints{MaxSize: 5, Expiry: t0}})
		b := mustBody(t, att)
		b[2+claimsLen+2+2+7] = 0
		_, err := decode(encodeBody(b))
		wantRefusal(t, err, ReasonMalformed, -1, errdefs.ErrInvalidArgument, "not in canonical form")
	})
}

func mustBody(t testing.TB, tok string) []byte {
	t.Helper()
	b, err := base64RawURL.DecodeString(strings.TrimPrefix(tok, prefix))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func encodeBody(b []byte) string { return prefix + base64RawURL.EncodeToString(b) }

// nonCanonicalTail sets the unused low bits of a token's last base64 character, which
// a lax decoder would ignore; it first appends caveats until the last character has some.
func nonCanonicalTail(t *testing.T, tok string) string {
	for len(mustBody(t, tok))%3 == 0 {
		tok = attenuate(t, tok, Caveat{Actions: []Action{Read}})
	}
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	last := strings.IndexByte(alphabet, tok[len(tok)-1])
	return tok[:len(tok)-1] + string(alphabet[last|1])
}

// withScopeByte sets the presence byte of a token's claims scope.
func withScopeByte(t *testing.T, tok string, set byte) string {
	t.Helper()
	b := mustBody(t, tok)
	subjectLen := int(b[2+22])<<8 | int(b[2+23])
	b[2+24+subjectLen] |= set
	return encodeBody(b)
}

// Admit refuses what Verify would refuse whatever the request (a bad signature, another
// audience, a revoked token, another subject, outside the validity window) and nothing
// else: a token admitted for one request may still be refused for what it touches.
func TestAdmit(t *testing.T) {
	keys := testKeyring(t)
	m := NewMinter(keys)
	revoked := NewMemoryRevocationList()
	v := NewVerifier(keys, revoked)
	ctx := context.Background()
	tok := mint(t, m, srcClaims())
	narrow := attenuate(t, tok.Encoded(), Caveat{Resource: "file:/workspace/src/ui"})
	d, err := v.Admit(ctx, narrow, "sandbox:sb-abc", t0)
	if err != nil {
		t.Fatal(err)
	}
	if d.Claims.ID != tok.Claims.ID || len(d.Caveats) != 1 || d.Caveats[0].Resource != "file:/workspace/src/ui" {
		t.Errorf("admitted %+v, want the token's claims and its one caveat", d)
	}
	agentTok := mint(t, m, Claims{Audience: Agent, Subject: "sandbox:sb-abc", Resource: "exec:*", Actions: []Action{Exec}, Constraints: Constraints{Expiry: t0.Add(time.Hour)}})
	short := attenuate(t, tok.Encoded(), Caveat{Constraints: Constraints{Expiry: t0.Add(time.Minute)}})
	for _, tc := range []struct {
		name, token, subject string
		at                   time.Time
		want                 Reason
	}{
		{"another subject", narrow, "sandbox:sb-other", t0, ReasonSubject},
		{"tampered", narrow[:len(narrow)-2] + "AA", "sandbox:sb-abc", t0, ReasonBadSignature},
		{"agent audience", agentTok.Encoded(), "sandbox:sb-abc", t0, ReasonAudience},
		{"expired by its caveat", short, "sandbox:sb-abc", t0.Add(2 * time.Minute), ReasonExpired},
		{"not yet valid", narrow, "sandbox:sb-abc", t0.Add(-2 * time.Hour), ReasonNotYetValid},
	} {
		_, err := v.Admit(ctx, tc.token, tc.subject, tc.at)
		var ce *Error
		if !errors.As(err, &ce) || ce.Reason != tc.want {
			t.Errorf("%s: Admit = %v, want reason %s", tc.name, err, tc.want)
		}
	}
	if err := revoked.Revoke(tok.Claims.ID); err != nil {
		t.Fatal(err)
	}
	var ce *Error
	if _, err := v.Admit(ctx, narrow, "sandbox:sb-abc", t0); !errors.As(err, &ce) || ce.Reason != ReasonRevoked {
		t.Errorf("revoked: Admit = %v, want revoked", err)
	}
}

// A reissued token grants exactly what the admitted one did — its caveats included — to
// the other audience, and no longer than asked.
func TestReissue(t *testing.T) {
	keys := testKeyring(t)
	m := NewMinter(keys)
	ctx := context.Background()
	tok := attenuate(t, mint(t, m, srcClaims()).Encoded(), Caveat{Resource: "file:/workspace/src/ui", Actions: []Action{Write}})
	d, err := NewVerifier(keys, nil).Admit(ctx, tok, "sandbox:sb-abc", t0)
	if err != nil {
		t.Fatal(err)
	}
	re, err := m.Reissue(d, Agent, t0.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	agentKeys, err := keys.ForAgent("sandbox:sb-abc")
	if err != nil {
		t.Fatal(err)
	}
	av := NewVerifier(agentKeys, nil)
	req := func(res string, a Action, at time.Time) error {
		_, err := av.Verify(ctx, re, Request{Subject: "sandbox:sb-abc", Resource: res, Action: a, Size: 10, Now: at})
		return err
	}
	if err := req("file:/workspace/src/ui/a.ts", Write, t0); err != nil {
		t.Errorf("the grant itself: %v", err)
	}
	for _, tc := range []struct {
		name, res string
		a         Action
		at        time.Time
		want      Reason
	}{
		{"outside the caveat's resource", "file:/workspace/src/a.ts", Write, t0, ReasonResource},
		{"an action the caveat took away", "file:/workspace/src/ui/a.ts", Read, t0, ReasonAction},
		{"an extension the claims do not allow", "file:/workspace/src/ui/a.go", Write, t0, ReasonExtension},
		{"after the reissue's expiry", "file:/workspace/src/ui/a.ts", Write, t0.Add(2 * time.Minute), ReasonExpired},
	} {
		var ce *Error
		if err := req(tc.res, tc.a, tc.at); !errors.As(err, &ce) || ce.Reason != tc.want {
			t.Errorf("%s: %v, want reason %s", tc.name, err, tc.want)
		}
	}
	if _, err := NewVerifier(keys, nil).Admit(ctx, re, "sandbox:sb-abc", t0); err == nil {
		t.Error("the control plane admitted the agent's reissued token")
	}
}

// A rotation adds a primary key that running agents, derived before it, do not hold: the
// control plane's tokens for agents are signed under the oldest key, which they do, while
// new tokens for callers are signed under the new primary. Dropping the old key after a
// leak leaves the agents that hold only it refusing everything, as they must.
func TestRotationKeepsRunningAgents(t *testing.T) {
	ctx := context.Background()
	before := testKeyring(t)
	oldAgent, err := before.ForAgent("sandbox:sb-abc")
	if err != nil {
		t.Fatal(err)
	}
	rotated, err := before.WithKey(before.NextID(), NewRootKey())
	if err != nil {
		t.Fatal(err)
	}
	if rotated.Primary() != 2 || rotated.Oldest() != 1 {
		t.Fatalf("rotated keyring: primary %d, oldest %d; want 2 and 1", rotated.Primary(), rotated.Oldest())
	}
	newAgent, err := rotated.ForAgent("sandbox:sb-abc")
	if err != nil {
		t.Fatal(err)
	}
	reissue := func(keys *Keyring) string {
		t.Helper()
		tok := mint(t, NewMinter(keys), srcClaims())
		d, err := NewVerifier(keys, nil).Admit(ctx, tok.Encoded(), "sandbox:sb-abc", t0)
		if err != nil {
			t.Fatal(err)
		}
		if tok.Claims.KeyID != keys.Primary() {
			t.Errorf("a caller's token signed under key %d, want the primary %d", tok.Claims.KeyID, keys.Primary())
		}
		re, err := NewMinter(keys).Reissue(d, Agent, t0.Add(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		return re
	}
	verifies := func(agent *Keyring, tok string) error {
		_, err := NewVerifier(agent, nil).Verify(ctx, tok, Request{Subject: "sandbox:sb-abc", Resource: "file:/workspace/src/a.ts", Action: Write, Size: 1, Now: t0})
		return err
	}
	re := reissue(rotated)
	if err := verifies(oldAgent, re); err != nil {
		t.Errorf("an agent started before the rotation refuses the reissued token: %v", err)
	}
	if err := verifies(newAgent, re); err != nil {
		t.Errorf("an agent started after the rotation refuses the reissued token: %v", err)
	}

	dropped, err := NewKeyring(2, map[uint32]RootKey{2: {rotated.keys[2]}})
	if err != nil {
		t.Fatal(err)
	}
	re = reissue(dropped)
	if err := verifies(oldAgent, re); err == nil {
		t.Errorf("an agent that holds only the dropped key accepted a token")
	}
	if err := verifies(newAgent, re); err != nil {
		t.Errorf("an agent that holds the remaining key refuses: %v", err)
	}
}
