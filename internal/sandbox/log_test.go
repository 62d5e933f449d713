package sandbox

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLastLogError(t *testing.T) {
	tests := []struct{ log, want string }{
		{`time="x" level=error msg="runc run failed: unable to start container process: exec: \"/x\": permission denied"` + "\n", `runc run failed: unable to start container process: exec: "/x": permission denied`},
		{"time=1 level=INFO msg=serving\npaddock-agent: bootstrap: read envelope length: EOF\n", "paddock-agent: bootstrap: read envelope length: EOF"},
		{"all fine\n", "it logged no error"},
	}
	for _, tt := range tests {
		p := filepath.Join(t.TempDir(), "agent.log")
		if err := os.WriteFile(p, []byte(tt.log), 0o600); err != nil {
			t.Fatal(err)
		}
		if got := LastLogError(p); got != tt.want {
			t.Errorf("LastLogError = %q, want %q", got, tt.want)
		}
	}
	if got := LastLogError("/nonexistent/agent.log"); got != "no log" {
		t.Errorf("missing log: %q", got)
	}
}

// FuzzLastLogError: the log is written by the agent, which runs inside the sandbox; reading
// it must never panic and yields one line.
func FuzzLastLogError(f *testing.F) {
	f.Add([]byte("level=error msg=\"x\"\n"))
	f.Add([]byte("paddock-agent: boom\x00\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p := filepath.Join(t.TempDir(), "agent.log")
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		if got := LastLogError(p); strings.Contains(got, "\n") {
			t.Fatalf("multi-line result %q", got)
		}
	})
}
