package capability

import (
	"context"
	"testing"
	"time"
)

// Verifying a token with three caveats: the target is 50µs.
func BenchmarkVerify(b *testing.B) {
	keys := testKeyring(b)
	tok := attenuate(b, mint(b, NewMinter(keys), srcClaims()).Encoded(),
		Caveat{Resource: "file:/workspace/src/ui"},
		Caveat{Actions: []Action{Write}},
		Caveat{Constraints: Constraints{MaxSize: 1 << 20, AllowedExtensions: []string{".ts", ".tsx"}, Expiry: t0.Add(time.Minute)}})
	v := NewVerifier(keys, nil)
	r := req("file:/workspace/src/ui/components/Button.tsx", Write, 4096)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := v.Verify(ctx, tok, r); err != nil {
			b.Fatal(err)
		}
	}
}

// The same at an agent, whose keyring holds derived keys (one HMAC fewer).
func BenchmarkVerifyAgent(b *testing.B) {
	keys := testKeyring(b)
	agent, _ := keys.ForAgent("sandbox:sb-abc")
	tok := attenuate(b, mint(b, NewMinter(keys), Claims{Audience: Agent, Subject: "sandbox:sb-abc", Resource: "exec:*",
		Actions: []Action{Exec}, Constraints: Constraints{Expiry: t0.Add(time.Hour)}}).Encoded(),
		Caveat{Resource: "exec:go"}, Caveat{Constraints: Constraints{Expiry: t0.Add(time.Minute)}})
	v := NewVerifier(agent, nil)
	r := req("exec:go", Exec, 0)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := v.Verify(context.Background(), tok, r); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMint(b *testing.B) {
	m := NewMinter(testKeyring(b))
	c := srcClaims()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := m.Mint(c); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAttenuate(b *testing.B) {
	tok := mint(b, NewMinter(testKeyring(b)), srcClaims()).Encoded()
	c := Caveat{Resource: "file:/workspace/src/ui", Actions: []Action{Read}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Attenuate(tok, c); err != nil {
			b.Fatal(err)
		}
	}
}
