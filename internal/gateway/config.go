package gateway

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"regexp"
	"strings"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// Kinds of provider API the gateway speaks. The kind decides how the platform key is
// sent, how usage is read from answers, and the shape of the gateway's own errors.
const (
	// KindOpenAI is the OpenAI API and the many servers compatible with it (vLLM,
	// Ollama, OpenRouter, …): `Authorization: Bearer KEY`.
	KindOpenAI = "openai"
	// KindAnthropic is Anthropic's Messages API: `x-api-key: KEY` and `anthropic-version`.
	KindAnthropic = "anthropic"
)

// DefaultMaxRequestBytes caps a request body when [Config.MaxRequestBytes] is 0. The
// largest prompts the providers accept (a few hundred thousand tokens of text) fit;
// base64-encoded images and files beyond it do not.
const DefaultMaxRequestBytes = 8 << 20

// DefaultAnthropicVersion is sent to an anthropic provider when the client sent no
// `anthropic-version` header of its own.
const DefaultAnthropicVersion = "2023-06-01"

// Config is the provider gateway's part of `paddock serve`'s configuration, typically
// under a `gateway:` key:
//
//	gateway:
//	  providers:
//	    - name: openai
//	      kind: openai
//	      base_url: https://api.openai.com
//	      api_key_env: OPENAI_API_KEY
//	      requests_per_minute: 60
//	      tokens_per_day: 2000000
//	    - name: anthropic
//	      kind: anthropic
//	      base_url: https://api.anthropic.com
//	      api_key_file: /etc/paddock/anthropic.key
type Config struct {
	// Providers are the LLM providers sandboxes may reach, each under its own path
	// segment: /gateway/{name}/… goes to that provider's base_url + ….
	Providers []Provider `yaml:"providers"`
	// MaxRequestBytes caps one request body; larger ones are refused with 413 before
	// anything reaches the provider. 0 means DefaultMaxRequestBytes (8 MiB).
	MaxRequestBytes int64 `yaml:"max_request_bytes"`
	// AgentModel is the model the coding agent in a sandbox (paddock-agent code) asks for
	// unless the user chose another (PUT /api/v1/me/agent) or the run names one;
	// sandboxes find it in PADDOCK_AGENT_MODEL.
	AgentModel string `yaml:"agent_model"`
}

// Provider is one upstream LLM API and the platform key that pays for it. Exactly one of
// APIKey, APIKeyEnv and APIKeyFile gives the key.
type Provider struct {
	// Name is the provider's path segment: a sandbox reaches it at /gateway/{Name}/.
	// Lower-case letters, digits, '.', '_' and '-'; unique among the providers.
	Name string `yaml:"name"`
	// Kind is the API the provider speaks: "openai" or "anthropic".
	Kind string `yaml:"kind"`
	// BaseURL is where the gateway forwards to: a request for /gateway/{Name}/v1/x goes
	// to BaseURL + "/v1/x". An http or https URL without user info, query or fragment.
	BaseURL string `yaml:"base_url"`
	// APIKey is the platform key itself. Discouraged: the config file then holds a
	// secret; prefer APIKeyEnv or APIKeyFile. It prints and logs as "[redacted]".
	APIKey Secret `yaml:"api_key"`
	// APIKeyEnv names the environment variable of `paddock serve` that holds the key.
	APIKeyEnv string `yaml:"api_key_env"`
	// APIKeyFile is a file whose contents (surrounding white space trimmed) are the key;
	// it should be readable by paddock's user only.
	APIKeyFile string `yaml:"api_key_file"`
	// RequestsPerMinute caps each user's requests to this provider (a token bucket that
	// allows that many at once and refills at that rate); 0 means unlimited.
	RequestsPerMinute int `yaml:"requests_per_minute"`
	// TokensPerDay is each user's daily budget of tokens (input plus output) on this
	// provider, from 00:00 UTC; once it is spent, requests get 429 until the next UTC
	// midnight. 0 means unlimited.
	TokensPerDay int64 `yaml:"tokens_per_day"`
}

var providerName = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// Validate checks the configuration without reading any key, and names the field that is
// wrong ("gateway.providers[1].base_url: …").
func (c Config) Validate() error {
	if c.MaxRequestBytes < 0 {
		return invalidField("gateway.max_request_bytes", "must not be negative")
	}
	seen := map[string]int{}
	for i, p := range c.Providers {
		prefix := fmt.Sprintf("gateway.providers[%d].", i)
		if j, dup := seen[p.Name]; dup {
			return invalidField(prefix+"name", "%q is already the name of gateway.providers[%d]", p.Name, j)
		}
		seen[p.Name] = i
		if err := p.validate(prefix); err != nil {
			return err
		}
	}
	return nil
}

func (p Provider) validate(prefix string) error {
	switch {
	case !providerName.MatchString(p.Name):
		return invalidField(prefix+"name", "%q: want 1-63 lower-case letters, digits, '.', '_' or '-', starting with a letter or digit", errdefs.Clip(p.Name, 64))
	case p.Kind != KindOpenAI && p.Kind != KindAnthropic:
		return invalidField(prefix+"kind", "%q: want %q or %q", errdefs.Clip(p.Kind, 64), KindOpenAI, KindAnthropic)
	case p.RequestsPerMinute < 0:
		return invalidField(prefix+"requests_per_minute", "must not be negative (0 is unlimited)")
	case p.TokensPerDay < 0:
		return invalidField(prefix+"tokens_per_day", "must not be negative (0 is unlimited)")
	}
	if _, err := parseBaseURL(p.BaseURL); err != nil {
		return invalidField(prefix+"base_url", "%v", err)
	}
	n := 0
	for _, set := range []bool{p.APIKey != "", p.APIKeyEnv != "", p.APIKeyFile != ""} {
		if set {
			n++
		}
	}
	if n != 1 {
		return invalidField(prefix+"api_key_env", "set exactly one of api_key_env, api_key_file and api_key (%d are set)", n)
	}
	return nil
}

// parseBaseURL accepts an absolute http(s) URL with nothing a key could hide in (user
// info, a query) and returns it without a trailing slash. Its errors never quote the URL,
// since a mistaken one may hold a key.
func parseBaseURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	switch {
	case s == "":
		return nil, fmt.Errorf("required (e.g. https://api.openai.com)")
	case err != nil:
		return nil, fmt.Errorf("not a URL")
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("want an http:// or https:// URL")
	case u.Host == "":
		return nil, fmt.Errorf("has no host")
	case u.User != nil:
		return nil, fmt.Errorf("must not carry user info; give the key with api_key_env or api_key_file")
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return nil, fmt.Errorf("must not have a query or fragment")
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = strings.TrimRight(u.RawPath, "/")
	return u, nil
}

// resolveKey reads provider i's key from where the configuration says it is. Errors name
// the variable or file, never the value.
func resolveKey(p Provider, i int, log *slog.Logger) (Secret, error) {
	prefix := fmt.Sprintf("gateway.providers[%d].", i)
	var key, field string
	switch {
	case p.APIKeyEnv != "":
		field = prefix + "api_key_env"
		key = strings.TrimSpace(os.Getenv(p.APIKeyEnv))
		if key == "" {
			return "", invalidField(field, "environment variable %s is not set or empty", errdefs.Clip(p.APIKeyEnv, 64))
		}
	case p.APIKeyFile != "":
		field = prefix + "api_key_file"
		b, err := os.ReadFile(p.APIKeyFile)
		if err != nil {
			return "", invalidField(field, "reading %s: %v", p.APIKeyFile, pathErr(err))
		}
		if key = strings.TrimSpace(string(b)); key == "" {
			return "", invalidField(field, "%s is empty", p.APIKeyFile)
		}
		if fi, err := os.Stat(p.APIKeyFile); err == nil && fi.Mode().Perm()&0o077 != 0 {
			log.Warn("gateway: a key file is readable by group or others; chmod 600 it",
				"provider", p.Name, "file", p.APIKeyFile, "mode", fi.Mode().Perm().String())
		}
	default:
		field = prefix + "api_key"
		key = strings.TrimSpace(p.APIKey.Reveal())
		log.Warn("gateway: a provider key is written in the configuration file; prefer api_key_env or api_key_file",
			"provider", p.Name)
	}
	for i := 0; i < len(key); i++ {
		if key[i] <= ' ' || key[i] >= 0x7f {
			return "", invalidField(field, "the key holds a space, control or non-ASCII character, which cannot go in an HTTP header")
		}
	}
	return Secret(key), nil
}

// pathErr is err without the operation and path that os errors repeat.
func pathErr(err error) error {
	if pe, ok := errors.AsType[*os.PathError](err); ok {
		return pe.Err
	}
	return err
}

func invalidField(field, format string, args ...any) error {
	return fmt.Errorf("%s: %s: %w", field, fmt.Sprintf(format, args...), errdefs.ErrInvalidArgument)
}
