package wire

import (
	"strings"
	"testing"
)

// A services URL off loopback is refused: the agent would listen where others could connect.
func TestServicesAddr(t *testing.T) {
	for _, tc := range []struct {
		url, want string
	}{
		{"http://127.0.0.1:7370", "127.0.0.1:7370"},
		{"http://[::1]:7370", "[::1]:7370"},
		{"http://0.0.0.0:7370", ""},
		{"http://10.0.0.1:7370", ""},
		{"http://localhost:7370", ""},
		{"https://127.0.0.1:7370", ""},
		{"http://127.0.0.1", ""},
		{"::", ""},
	} {
		got, err := ServicesAddr(ServicesEnv, tc.url)
		if got != tc.want || (err == nil) != (tc.want != "") {
			t.Errorf("ServicesAddr(%q) = %q, %v; want %q", tc.url, got, err, tc.want)
		}
	}
}

func TestWelcomeCommand(t *testing.T) {
	got := strings.Join(WelcomeCommand("/a/paddock-agent", 8080), " ")
	if got != "/a/paddock-agent welcome --listen 127.0.0.1:8080" {
		t.Fatal(got)
	}
}

// Model names as providers spell them pass; empty, long, spaced or control-character ones
// do not.
func TestCheckAgentModel(t *testing.T) {
	for _, m := range []string{"gpt-4o", "claude-sonnet-4-5-20250929", "llama3.1:8b", "openai/gpt-4o", "accounts/fw/models/x@v1+q", strings.Repeat("m", MaxAgentModel)} {
		if err := CheckAgentModel(m); err != nil {
			t.Errorf("CheckAgentModel(%q) = %v, want nil", m, err)
		}
	}
	for _, m := range []string{"", "-x", "gpt 4", "gpt\n4", "x;rm", `"x"`, "é", strings.Repeat("m", MaxAgentModel+1)} {
		if err := CheckAgentModel(m); err == nil {
			t.Errorf("CheckAgentModel(%q) = nil, want an error", m)
		}
	}
}
