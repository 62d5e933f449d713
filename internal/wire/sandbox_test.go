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
