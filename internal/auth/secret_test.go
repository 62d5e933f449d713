package auth

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

// TestSecretsNeverPrinted logs, prints and marshals every secret-bearing value in
// every usual way and checks that the secret never comes out.
func TestSecretsNeverPrinted(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	reg := e.register(t, "alice")
	sess := e.login(t, "alice")
	tok, _, err := e.svc.CreateAPIToken(ctx, reg.User, TokenSpec{Name: "cli"})
	if err != nil {
		t.Fatal(err)
	}
	pw := Password("hunter2hunter2hunter2")
	secrets := map[string]any{
		"password":        pw,
		"session id":      sess.ID,
		"token":           tok,
		"recovery code":   reg.RecoveryCodes[0],
		"session":         sess,
		"registration":    reg,
		"login request":   LoginRequest{Username: "alice", Password: pw},
		"recover request": RecoverRequest{Username: "alice", Code: reg.RecoveryCodes[1], NewPassword: pw},
	}
	raw := []string{pw.Reveal(), sess.ID.Reveal(), tok.Reveal(), tok.Reveal()[12:], reg.RecoveryCodes[0].Reveal(), reg.RecoveryCodes[1].Reveal()}
	for name, v := range secrets {
		t.Run(name, func(t *testing.T) {
			var out bytes.Buffer
			slog.New(slog.NewJSONHandler(&out, nil)).Info("m", "v", v)
			slog.New(slog.NewTextHandler(&out, nil)).Info("m", "v", v)
			slog.New(slog.NewTextHandler(&out, nil)).Info("m", slog.Any("v", v))
			for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x"} {
				fmt.Fprintf(&out, verb+"\n", v)
			}
			j, err := json.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			out.Write(j)
			for _, s := range raw {
				if strings.Contains(out.String(), s) || strings.Contains(out.String(), fmt.Sprintf("%x", s)) {
					t.Errorf("output contains a secret:\n%s", out.String())
					break
				}
			}
			if !strings.Contains(out.String(), redacted) {
				t.Errorf("no redaction marker in output:\n%s", out.String())
			}
		})
	}
}
