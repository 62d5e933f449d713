package capability

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// TestRedaction prints, logs and marshals keys, keyrings and tokens every way a
// mistake might, and looks for the secret in the output.
func TestRedaction(t *testing.T) {
	key := RootKey{bytes.Repeat([]byte{0xab}, 32)}
	keys, err := NewKeyring(1, map[uint32]RootKey{1: key})
	if err != nil {
		t.Fatal(err)
	}
	agent, _ := keys.ForAgent("sandbox:sb-abc")
	tok := mint(t, NewMinter(keys), srcClaims())
	secrets := []string{"abab", "171, 171", "ABAB", "q6ur", string(key.b), tok.Encoded()[5:40]}
	for i := range agent.keys[1][:8] {
		secrets = append(secrets, fmt.Sprint(agent.keys[1][i:i+4]), fmt.Sprintf("%x", agent.keys[1][i:i+4]))
	}

	var out bytes.Buffer
	for _, v := range []any{key, &key, keys, *keys, agent, *agent, tok, &tok,
		struct{ K RootKey }{key}, []RootKey{key}, map[uint32]RootKey{1: key}, struct{ T Token }{tok}} {
		for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%x", "%X", "%d", "%q"} {
			fmt.Fprintf(&out, verb+"\n", v)
		}
		slog.New(slog.NewJSONHandler(&out, nil)).Info("x", "v", v)
		slog.New(slog.NewTextHandler(&out, nil)).Info("x", "v", v)
		if j, err := json.Marshal(v); err == nil {
			out.Write(j)
		}
	}
	for _, s := range secrets {
		if strings.Contains(out.String(), s) {
			t.Fatalf("the output holds %q:\n%s", s, out.String())
		}
	}
	for _, want := range []string{"[redacted]", "capability keyring (primary 1, keys [1])",
		"capability keyring (primary 1, keys [1], agent sandbox:sb-abc)", "capability " + tok.Claims.ID + " for sandbox:sb-abc: read,write file:/workspace/src until 2026-09-01T13:00:00Z"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("the output lacks %q:\n%s", want, out.String())
		}
	}
	if !bytes.Equal(key.Reveal(), key.b) {
		t.Fatal("Reveal")
	}
}

func TestRootKey(t *testing.T) {
	a, b := NewRootKey(), NewRootKey()
	if len(a.Reveal()) != 32 || bytes.Equal(a.Reveal(), b.Reveal()) {
		t.Fatal("NewRootKey is not 32 fresh bytes")
	}
	src := bytes.Repeat([]byte{1}, 40)
	k, err := RootKeyFromBytes(src)
	if err != nil {
		t.Fatal(err)
	}
	src[0] = 2
	if k.b[0] != 1 {
		t.Fatal("RootKeyFromBytes keeps the caller's slice")
	}
	for _, n := range []int{0, 31, 65} {
		if _, err := RootKeyFromBytes(make([]byte, n)); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Fatalf("%d bytes: %v", n, err)
		}
	}
	for _, tt := range []struct {
		primary uint32
		keys    map[uint32]RootKey
		msg     string
	}{
		{1, map[uint32]RootKey{}, "the primary key 1 is not among the keys"},
		{2, map[uint32]RootKey{1: a}, "the primary key 2 is not among the keys"},
		{0, map[uint32]RootKey{0: a}, "key ID 0"},
		{1, map[uint32]RootKey{1: {}}, "key 1 is not a key"},
	} {
		if _, err := NewKeyring(tt.primary, tt.keys); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("NewKeyring(%d, …): %v, want %q", tt.primary, err, tt.msg)
		}
	}
}

func TestKeyringExport(t *testing.T) {
	keys, _ := NewKeyring(1, map[uint32]RootKey{1: testKey(1)})
	keys, _ = keys.WithKey(3, testKey(3))
	agent, _ := keys.ForAgent("sandbox:sb-abc")
	for _, k := range []*Keyring{keys, agent} {
		again, err := ParseKeyring(k.Export())
		if err != nil {
			t.Fatalf("%s\n%v", k.Export(), err)
		}
		if again.String() != k.String() || !bytes.Equal(again.Export(), k.Export()) {
			t.Fatalf("%v became %v", k, again)
		}
	}
	// The exported agent keyring verifies what the control plane minted for it.
	again, _ := ParseKeyring(agent.Export())
	tok := mint(t, NewMinter(keys), Claims{Audience: Agent, Subject: "sandbox:sb-abc", Resource: "exec:go", Actions: []Action{Exec},
		Constraints: Constraints{Expiry: t0.Add(time.Minute)}})
	if _, err := NewVerifier(again, nil).Verify(t.Context(), tok.Encoded(), req("exec:go", Exec, 0)); err != nil {
		t.Fatal(err)
	}
	if want := "paddock-capability-keyring 1\nprimary 3\nagent sandbox:sb-abc\nkey 1 "; !strings.HasPrefix(string(agent.Export()), want) {
		t.Fatalf("export:\n%s", agent.Export())
	}
}

func TestParseKeyring(t *testing.T) {
	k1 := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 32))
	k2 := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{2}, 64))
	tests := []struct{ in, err string }{
		{"paddock-capability-keyring 1\nprimary 1\nkey 1 " + k1, ""},
		{"# comment\n\n paddock-capability-keyring  1 \r\nkey 2 " + k2 + "\r\nkey 1 " + k1 + "\nprimary 2\nagent user:u1\n", ""},
		{"", "empty; want the header"},
		{"paddock-keyring 1\nprimary 1\nkey 1 " + k1, `line 1: want the header "paddock-capability-keyring 1" first`},
		{"paddock-capability-keyring 1\nkey 1 " + k1, "no primary line"},
		{"paddock-capability-keyring 1\nprimary 2\nkey 1 " + k1, "primary 2 has no key line"},
		{"paddock-capability-keyring 1\nprimary 1\nprimary 1\nkey 1 " + k1, "line 3: want one each of"},
		{"paddock-capability-keyring 1\nprimary 1\nkey 1 " + k1 + "\nkey 1 " + k1, "line 4: key 1 a second time"},
		{"paddock-capability-keyring 1\nprimary 1\nkey 1 " + k1[:20], "line 3: key 1: want standard base64 of 32 to 64 bytes"},
		{"paddock-capability-keyring 1\nprimary 01\nkey 1 " + k1, "line 2: primary: key IDs are numbers from 1 to 4294967295"},
		{"paddock-capability-keyring 1\nprimary 4294967296\nkey 1 " + k1, "line 2: primary: key IDs are numbers"},
		{"paddock-capability-keyring 1\nprimary 1\nagent sb\nkey 1 " + k1, "line 3: agent: subject sb: want kind:id"},
		{"paddock-capability-keyring 1\nprimary 1\nagent a:b\nagent a:c\nkey 1 " + k1, "line 4: want one each of"},
		{"paddock-capability-keyring 1\n" + strings.Repeat("#", 64<<10), "over 64 KiB"},
	}
	for _, tt := range tests {
		k, err := ParseKeyring([]byte(tt.in))
		if tt.err == "" {
			if err != nil {
				t.Errorf("%q: %v", tt.in, err)
			}
			continue
		}
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tt.err) {
			t.Errorf("%q: %v %v, want %q", tt.in, k, err, tt.err)
		}
		if err != nil && (strings.Contains(err.Error(), k1[:16]) || strings.Contains(err.Error(), k2[:16])) {
			t.Errorf("the error quotes a key: %v", err)
		}
	}
}
