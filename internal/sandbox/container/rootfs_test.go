package container

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestImageRootfs: an image's root has the sandbox's identity files and the host's curated
// /etc copied in, and nothing secret.
func TestImageRootfs(t *testing.T) {
	root := t.TempDir()
	if err := ImageRootfs(root, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	passwd, err := os.ReadFile(filepath.Join(root, "etc/passwd"))
	if err != nil || !strings.Contains(string(passwd), "sandbox:x:1000:1000:") {
		t.Fatalf("passwd %q, %v", passwd, err)
	}
	for _, secret := range []string{"etc/shadow", "etc/sudoers", "etc/ssh"} {
		if _, err := os.Lstat(filepath.Join(root, secret)); err == nil {
			t.Errorf("%s is in the image", secret)
		}
	}
	// A directory of hostEtc comes with its entries (the alternatives' symlinks, which the
	// node's /usr/bin points through), not as an empty mount point.
	entries, _ := os.ReadDir("/etc/alternatives")
	if len(entries) == 0 {
		t.Skip("this host has no /etc/alternatives to compare with")
	}
	got, _ := os.ReadDir(filepath.Join(root, "etc/alternatives"))
	if len(got) == 0 {
		t.Fatalf("etc/alternatives is empty; the host has %d entries", len(entries))
	}
}
