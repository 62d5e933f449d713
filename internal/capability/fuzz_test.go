package capability

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// FuzzVerify: the verifier never panics, refuses with an *Error in the taxonomy, and no
// token authenticates unless it was minted (or attenuated from one minted) here — so
// random changes to valid tokens, which the fuzzer starts from, always fail. The
// fuzzer mutates both the encoded string and, to reach the decoder's depths faster,
// the binary body under it.
func FuzzVerify(f *testing.F) {
	keys := testKeyring(f)
	agentKeys, _ := keys.ForAgent("sandbox:sb-abc")
	m := countingMinter(keys) // the same tokens in every fuzzing process
	known := map[string]bool{}
	base := mint(f, m, srcClaims()).Encoded()
	for _, tok := range []string{
		base,
		attenuate(f, base, Caveat{Resource: "file:/workspace/src/ui"}, Caveat{Actions: []Action{Read}},
			Caveat{Constraints: Constraints{MaxSize: 10, AllowedExtensions: []string{".ts"}, Expiry: t0.Add(time.Minute)}}),
		mint(f, m, Claims{Audience: Agent, Subject: "sandbox:sb-abc", Resource: "exec:*", Actions: []Action{Exec},
			Constraints: Constraints{Expiry: t0.Add(time.Hour)}}).Encoded(),
		mint(f, m, Claims{Subject: "sandbox:sb-abc", Resource: "net:*.example.com", Actions: []Action{Connect},
			Constraints: Constraints{Expiry: t0.Add(time.Hour), NotBefore: t0.Add(-time.Hour)}}).Encoded(),
	} {
		known[tok] = true
		f.Add(tok, mustBody(f, tok))
	}
	for _, s := range []string{"", "pdk1.", "pdk1.AAAA", "pdk2.AAAA", "pdk1.====", "pdk1." + strings.Repeat("A", 60)} {
		f.Add(s, []byte(nil))
	}
	verifiers := []*Verifier{NewVerifier(keys, nil), NewVerifier(agentKeys, nil)}
	reqs := []Request{
		req("file:/workspace/src/ui/a.ts", Read, 1),
		req("file:/workspace/src/a.ts", Write, 1),
		req("exec:go", Exec, 0),
		req("net:a.example.com", Connect, 0),
	}
	check := func(t *testing.T, s string) {
		for _, v := range verifiers {
			if _, err := v.authenticate(s); err == nil && !known[s] {
				t.Fatalf("a token never minted authenticates: %q", s)
			}
			for _, r := range reqs {
				_, err := v.Verify(context.Background(), s, r)
				if err == nil && !known[s] {
					t.Fatalf("a token never minted is allowed %+v: %q", r, s)
				}
				var e *Error
				if err != nil && (!errors.As(err, &e) || !errors.Is(err, errdefs.ErrPermissionDenied) && !errors.Is(err, errdefs.ErrInvalidArgument)) {
					t.Fatalf("refusal outside the taxonomy: %T %v", err, err)
				}
			}
		}
		d, err := decode(s)
		if err != nil {
			return
		}
		if d.encode() != s {
			t.Fatalf("decode is not canonical: %q", s)
		}
		att, err := Attenuate(s, Caveat{Actions: []Action{Read}})
		if err != nil {
			if !errors.Is(err, errdefs.ErrLimitExceeded) {
				t.Fatalf("a token that decodes does not attenuate: %v", err)
			}
			return
		}
		if _, err := verifiers[0].authenticate(s); err == nil {
			if _, err := verifiers[0].authenticate(att); err != nil {
				t.Fatalf("an attenuated good token does not authenticate: %v", err)
			}
		}
	}
	f.Fuzz(func(t *testing.T, s string, body []byte) {
		check(t, s)
		if len(body) <= MaxTokenLen {
			check(t, encodeBody(body))
		}
	})
}

// FuzzAttenuate: for any caveat and any request, a request the attenuated token allows
// is one the token allowed before; and an attenuated good token still authenticates.
func FuzzAttenuate(f *testing.F) {
	keys := testKeyring(f)
	m := countingMinter(keys)
	v := NewVerifier(keys, nil)
	exp := Constraints{Expiry: t0.Add(time.Hour), NotBefore: t0.Add(-time.Hour)}
	file := mint(f, m, srcClaims()).Encoded()
	bases := []string{
		file,
		mint(f, m, Claims{Subject: "sandbox:sb-abc", Resource: "file:/", Actions: []Action{Read, Write, Delete}, Constraints: exp}).Encoded(),
		mint(f, m, Claims{Subject: "sandbox:sb-abc", Resource: "exec:*", Actions: []Action{Exec}, Constraints: exp}).Encoded(),
		mint(f, m, Claims{Subject: "sandbox:sb-abc", Resource: "net:*.example.com", Actions: []Action{Connect}, Constraints: exp}).Encoded(),
		attenuate(f, file, Caveat{Resource: "file:/workspace/src/ui"}, Caveat{Constraints: Constraints{MaxSize: 100, Expiry: t0.Add(time.Minute)}}),
	}
	type in struct {
		base    uint8
		res     string
		acts    uint8
		maxSize int64
		exts    string
		nb, exp int32
		reqRes  string
		reqAct  uint8
		size    int64
		now     int32
	}
	for _, s := range []in{
		{0, "file:/workspace/src/ui", 1, 0, ".ts", 0, 0, "file:/workspace/src/ui/a.ts", 0, 1, 0},
		{0, "file:/", 31, 1 << 40, ".exe,.ts", -86400, 86400, "file:/workspace/src/a.exe", 1, 1 << 30, 3599},
		{1, "file:/workspace/srcx", 2, 10, "", 0, 60, "file:/workspace/src/a", 1, 5, 30},
		{2, "exec:node", 8, 0, "", 0, 0, "exec:node", 3, 0, 0},
		{2, "exec:*", 31, 0, ".sh", 0, 0, "exec:sh", 3, 0, 0},
		{3, "net:*.a.example.com", 16, 0, "", -10, 0, "net:b.a.example.com", 4, 0, -5},
		{3, "net:example.com", 16, 0, "", 0, 0, "net:example.com", 4, 0, 0},
		{4, "file:/workspace", 7, 1000, ".tsx,.ts", 0, 7200, "file:/workspace/src/ui/x.ts", 0, 100, 59},
	} {
		f.Add(s.base, s.res, s.acts, s.maxSize, s.exts, s.nb, s.exp, s.reqRes, s.reqAct, s.size, s.now)
	}
	offset := func(s int32) time.Time {
		if s == 0 {
			return time.Time{}
		}
		return t0.Add(time.Duration(s) * time.Second)
	}
	f.Fuzz(func(t *testing.T, base uint8, res string, acts uint8, maxSize int64, exts string, nb, exp int32,
		reqRes string, reqAct uint8, size int64, now int32) {
		tok := bases[int(base)%len(bases)]
		c := Caveat{Resource: res, Actions: actionSet(acts & uint8(allActions)).list(),
			Constraints: Constraints{MaxSize: maxSize, NotBefore: offset(nb), Expiry: offset(exp)}}
		if acts&0x80 != 0 {
			c.Actions = append(c.Actions, "bogus")
		}
		if exts != "" {
			c.Constraints.AllowedExtensions = strings.Split(exts, ",")
		}
		att, err := Attenuate(tok, c)
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalidArgument) && !errors.Is(err, errdefs.ErrLimitExceeded) {
				t.Fatalf("Attenuate: error outside the taxonomy: %v", err)
			}
			return
		}
		if _, err := v.authenticate(att); err != nil {
			t.Fatalf("an attenuated token does not authenticate: %v", err)
		}
		action := Action("bogus")
		if i := int(reqAct) % (len(actionNames) + 1); i < len(actionNames) {
			action = actionNames[i]
		}
		r := Request{Subject: "sandbox:sb-abc", Resource: reqRes, Action: action, Size: size, Now: t0.Add(time.Duration(now) * time.Second)}
		_, errAtt := v.Verify(context.Background(), att, r)
		_, errBase := v.Verify(context.Background(), tok, r)
		if errAtt == nil && errBase != nil {
			t.Fatalf("the caveat %+v widened the token: %+v is refused before (%v) and allowed after", c, r, errBase)
		}
	})
}

// FuzzParseKeyring: the keyring parser never panics, and what it reads exports and
// parses back the same.
func FuzzParseKeyring(f *testing.F) {
	keys := testKeyring(f)
	agent, _ := keys.ForAgent("sandbox:sb-abc")
	f.Add(keys.Export())
	f.Add(agent.Export())
	f.Add([]byte("paddock-capability-keyring 1\nprimary 1\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		k, err := ParseKeyring(data)
		if err != nil {
			return
		}
		again, err := ParseKeyring(k.Export())
		if err != nil || again.String() != k.String() || string(again.Export()) != string(k.Export()) {
			t.Fatalf("%v does not round-trip: %v", k, err)
		}
	})
}

// countingMinter gives tokens the IDs 1, 2, 3…, so that tokens minted in a fuzz
// target's setup are the same in the coordinator and every worker.
func countingMinter(keys *Keyring) *Minter {
	m := NewMinter(keys)
	n := byte(0)
	m.randID = func(b []byte) { clear(b); n++; b[len(b)-1] = n }
	return m
}
