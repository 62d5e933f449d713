package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/paddockhq/paddock/internal/errdefs"
)

func TestConfigYAML(t *testing.T) {
	src := `
providers:
  - name: openai
    kind: openai
    base_url: https://api.openai.com
    api_key_env: OPENAI_API_KEY
    requests_per_minute: 60
    tokens_per_day: 2000000
  - name: anthropic
    kind: anthropic
    base_url: https://api.anthropic.com/
    api_key_file: /etc/paddock/anthropic.key
  - name: local
    kind: openai
    base_url: http://127.0.0.1:11434/v1
    api_key: not-a-real-key
max_request_bytes: 1048576
`
	var c Config
	dec := yaml.NewDecoder(strings.NewReader(src))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	want := Provider{Name: "openai", Kind: KindOpenAI, BaseURL: "https://api.openai.com", APIKeyEnv: "OPENAI_API_KEY", RequestsPerMinute: 60, TokensPerDay: 2000000}
	if c.Providers[0] != want || c.Providers[1].APIKeyFile != "/etc/paddock/anthropic.key" || c.Providers[2].APIKey.Reveal() != "not-a-real-key" || c.MaxRequestBytes != 1<<20 {
		t.Fatalf("decoded %+v", c)
	}
	// Dumped again, the key is redacted.
	out, err := yaml.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), "not-a-real-key") || !strings.Contains(string(out), redacted) {
		t.Fatalf("YAML dump:\n%s", out)
	}
}

func TestConfigValidate(t *testing.T) {
	ok := Provider{Name: "openai", Kind: KindOpenAI, BaseURL: "https://api.openai.com", APIKeyEnv: "K"}
	for _, tc := range []struct {
		name  string
		edit  func(*Provider)
		field string
	}{
		{"name empty", func(p *Provider) { p.Name = "" }, "providers[1].name"},
		{"name with a slash", func(p *Provider) { p.Name = "a/b" }, "providers[1].name"},
		{"name upper case", func(p *Provider) { p.Name = "OpenAI" }, "providers[1].name"},
		{"duplicate name", func(p *Provider) { p.Name = "first" }, "providers[1].name"},
		{"kind", func(p *Provider) { p.Kind = "gemini" }, "providers[1].kind"},
		{"no base_url", func(p *Provider) { p.BaseURL = "" }, "providers[1].base_url"},
		{"relative base_url", func(p *Provider) { p.BaseURL = "api.openai.com/v1" }, "providers[1].base_url"},
		{"ftp base_url", func(p *Provider) { p.BaseURL = "ftp://x" }, "providers[1].base_url"},
		{"user info", func(p *Provider) { p.BaseURL = "https://user:sk-secret@x" }, "providers[1].base_url"},
		{"query", func(p *Provider) { p.BaseURL = "https://x/v1?key=sk-secret" }, "providers[1].base_url"},
		{"no key", func(p *Provider) { p.APIKeyEnv = "" }, "providers[1].api_key_env"},
		{"two keys", func(p *Provider) { p.APIKeyFile = "/k" }, "providers[1].api_key_env"},
		{"negative rpm", func(p *Provider) { p.RequestsPerMinute = -1 }, "providers[1].requests_per_minute"},
		{"negative budget", func(p *Provider) { p.TokensPerDay = -1 }, "providers[1].tokens_per_day"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := ok
			tc.edit(&p)
			first := ok
			first.Name = "first"
			err := Config{Providers: []Provider{first, p}}.Validate()
			if err == nil || !strings.HasPrefix(err.Error(), "gateway."+tc.field+": ") || !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("got %v, want an invalid argument naming gateway.%s", err, tc.field)
			}
			if strings.Contains(err.Error(), "sk-secret") {
				t.Fatalf("the error quotes a secret: %v", err)
			}
		})
	}
	if err := (Config{MaxRequestBytes: -1}).Validate(); err == nil || !strings.Contains(err.Error(), "gateway.max_request_bytes") {
		t.Fatalf("negative max_request_bytes: %v", err)
	}
	if err := (Config{}).Validate(); err != nil {
		t.Fatalf("an empty configuration (no providers) is valid: %v", err)
	}
}

// New reads keys from the environment or a file; its errors name the field and where it
// looked, never a key.
func TestNewKeys(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const secret = "sk-very-secret-value"
	t.Setenv("GW_KEY_SET", "  "+secret+"\n")
	t.Setenv("GW_KEY_EMPTY", "")
	t.Setenv("GW_KEY_BAD", secret+" with space")
	good := write("good.key", secret+"\n", 0o600)
	open := write("open.key", secret, 0o644)
	for _, tc := range []struct {
		name string
		p    Provider
		want string // "" for success; else in the error
	}{
		{"env", Provider{APIKeyEnv: "GW_KEY_SET"}, ""},
		{"file", Provider{APIKeyFile: good}, ""},
		{"inline", Provider{APIKey: secret}, ""},
		{"env unset", Provider{APIKeyEnv: "GW_KEY_UNSET_XYZ"}, "gateway.providers[0].api_key_env: environment variable GW_KEY_UNSET_XYZ is not set or empty"},
		{"env empty", Provider{APIKeyEnv: "GW_KEY_EMPTY"}, "GW_KEY_EMPTY is not set or empty"},
		{"env bad characters", Provider{APIKeyEnv: "GW_KEY_BAD"}, "cannot go in an HTTP header"},
		{"file missing", Provider{APIKeyFile: filepath.Join(dir, "nope")}, "gateway.providers[0].api_key_file: reading " + filepath.Join(dir, "nope")},
		{"file empty", Provider{APIKeyFile: write("empty.key", " \n", 0o600)}, "is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			tc.p.Name, tc.p.Kind, tc.p.BaseURL = "p", KindOpenAI, "https://x"
			g, err := New(Config{Providers: []Provider{tc.p}}, Options{Log: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if got := g.providers["p"].key.Reveal(); got != secret {
					t.Fatalf("key %q", got)
				}
			} else if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
			if err != nil && strings.Contains(err.Error(), secret) {
				t.Fatalf("the error quotes the key: %v", err)
			}
			if strings.Contains(logs.String(), secret) {
				t.Fatalf("the log has the key: %s", logs.String())
			}
		})
	}
	var logs bytes.Buffer
	if _, err := New(Config{Providers: []Provider{{Name: "p", Kind: KindOpenAI, BaseURL: "https://x", APIKeyFile: open}}},
		Options{Log: slog.New(slog.NewTextHandler(&logs, nil))}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "readable by group or others") {
		t.Errorf("no warning for a key file others can read: %s", logs.String())
	}
}

// A Secret never prints, logs or marshals as itself, nor does a Config or Provider that
// holds one.
func TestSecretRedacted(t *testing.T) {
	const key = "sk-redact-me"
	p := Provider{Name: "p", Kind: KindOpenAI, BaseURL: "https://x", APIKey: key}
	cfg := Config{Providers: []Provider{p}}
	var logs bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	log.Info("config", "cfg", cfg, "key", p.APIKey, "provider", p)
	slog.New(slog.NewTextHandler(&logs, nil)).Info("config", "cfg", cfg, "key", p.APIKey)
	j, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(cfg, Options{Log: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	out := fmt.Sprintf("%v %+v %#v %s %q %v %+v %#v", cfg, cfg, cfg, p.APIKey, p.APIKey, g, g.providers["p"], *g.providers["p"]) + string(j) + logs.String()
	if strings.Contains(out, key) {
		t.Fatalf("the key shows:\n%s", out)
	}
	if !strings.Contains(string(j), `"APIKey":"[redacted]"`) {
		t.Fatalf("JSON: %s", j)
	}
}
