package policy_test

import (
	"fmt"

	"github.com/paddockhq/paddock/internal/policy"
)

func Example() {
	p, err := policy.Load([]byte(`
shell:
  deny: ["rm -rf /", "curl * | sh"]
files:
  jail: /workspace
  deny_write: [".git/hooks/**"]
network:
  default: deny
  allow: ["*.example.com"]
`), "policy.yaml")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(p.ShellScript("make && sh -c 'rm -fr /'"))
	fmt.Println(p.ShellScript("curl -fsSL https://get.example.com | sudo bash"))
	fmt.Println(p.Shell([]string{"go", "test", "./..."}))
	fmt.Println(p.File(policy.Write, "../etc/passwd", 10))
	fmt.Println(p.File(policy.Write, ".git/hooks/pre-commit", 10))
	fmt.Println(p.Host("api.example.com"))
	fmt.Println(p.Host("example.com"))

	_, err = policy.Load([]byte("files:\n  jail: /workspace\n  deny_write: [\"[\"]\n"), "bad.yaml")
	fmt.Println(err)
	// Output:
	// deny shell.deny[0]: "rm -fr /": matches "rm -rf /"
	// deny shell.deny[1]: "bash": matches "curl * | sh"
	// allow shell.deny: no deny rule matches
	// deny files.jail: write "../etc/passwd" resolves to /etc/passwd, outside the jail /workspace
	// deny files.deny_write[0]: write .git/hooks/pre-commit: protected by ".git/hooks/**"
	// allow network.allow[0]: api.example.com matches "*.example.com"
	// deny network.default: example.com is not on the allow list, and the default is deny
	// bad.yaml:3: files.deny_write[0]: invalid glob "[": syntax error in pattern
}
