package coder

import (
	"errors"
	"strings"
	"testing"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/wire"
)

// --provider reaches the named provider at its own gateway path, with its kind's API,
// wherever it stands in the list; a name not in the list is refused, naming those that are.
func TestUseProvider(t *testing.T) {
	t.Setenv(servicesEnv, "http://127.0.0.1:4750/")
	t.Setenv(wire.AgentProvidersEnv, "openai=openai,claude=anthropic,local=openai")
	for _, tc := range []struct{ name, api, base string }{
		{"openai", APIOpenAI, "http://127.0.0.1:4750/gateway/openai/v1"},
		{"claude", APIAnthropic, "http://127.0.0.1:4750/gateway/claude"},
		{"local", APIOpenAI, "http://127.0.0.1:4750/gateway/local/v1"},
	} {
		cfg := Config{API: APIAnthropic}
		if err := useProvider(&cfg, tc.name); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if cfg.API != tc.api || cfg.BaseURL != tc.base || cfg.APIKey == "" {
			t.Errorf("%s: API %q, base %q, key %q; want %q, %q and a placeholder", tc.name, cfg.API, cfg.BaseURL, cfg.APIKey, tc.api, tc.base)
		}
	}
	err := useProvider(&Config{}, "nope")
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "openai, claude, local") {
		t.Errorf("an unknown provider: %v; want invalid argument naming the providers", err)
	}
	t.Setenv(wire.AgentProvidersEnv, "")
	if err := useProvider(&Config{}, "openai"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("no providers: %v", err)
	}
}
