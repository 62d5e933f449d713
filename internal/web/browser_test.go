package web

import (
	"os"
	"testing"

	"github.com/paddockhq/paddock/internal/browsertest"
)

// TestBrowserAuthFlow drives tests/browser/auth.mjs in chromium against a real
// server: register, see the codes, continue Home, sign out, sign in, switch role,
// recover with a code, and have the used code refused. Screenshots go to
// $SCREENSHOT_DIR when set (to look at the pages), else to a temporary directory.
func TestBrowserAuthFlow(t *testing.T) {
	e := newEnv(t, false)
	shots := os.Getenv("SCREENSHOT_DIR")
	if shots == "" {
		shots = t.TempDir()
	}
	out := browsertest.Run(t, "auth", map[string]string{
		"BASE_URL":       e.srv.URL,
		"HOME_PATH":      testHome,
		"SCREENSHOT_DIR": shots,
	})
	t.Log(out)
}
