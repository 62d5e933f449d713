package policy

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// FuzzLoad: the loader never panics, is deterministic, and refuses with a *LoadError.
func FuzzLoad(f *testing.F) {
	f.Add([]byte(example))
	f.Add([]byte(filesPolicy))
	f.Add([]byte(networkPolicy))
	f.Add([]byte(denyPolicy))
	f.Add([]byte("files:\n  jail: /w\n  deny_write: [\"[\"]\n"))
	f.Add([]byte("network:\n  default: deny\n  allow: [r.corp.test]\n  private: [r.corp.test, 10.20.0.0/16, \"fd00::1\"]\n"))
	f.Add([]byte("network: {default: allow, allow: [a.com]}"))
	f.Add([]byte("a: &x [*x]"))
	f.Add([]byte("resources: {memory: 1e400, cpus: .inf, pids: 0x10, timeout: 1h}"))
	f.Add([]byte("resources: {tmp: 0.5k, file_size: 1e400}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Load(data, "fuzz.yaml")
		if err != nil {
			var le *LoadError
			if !errors.As(err, &le) {
				t.Fatalf("error is not a *LoadError: %T %v", err, err)
			}
			if _, err2 := Load(data, "fuzz.yaml"); err2 == nil || err2.Error() != err.Error() {
				t.Fatalf("not deterministic: %v, then %v", err, err2)
			}
			return
		}
		p2, err := Load(data, "fuzz.yaml")
		if err != nil || p.Summary() != p2.Summary() {
			t.Fatalf("not deterministic: %q, then %v %v", p.Summary(), p2, err)
		}
		_ = p.ShellScript("rm -rf / | sh")
		_ = p.File(Write, "a/.env", 1)
		_ = p.Host("example.com")
	})
}

// FuzzShellScript: the matcher never panics, is deterministic, and the script decision
// agrees with the command-by-command one.
func FuzzShellScript(f *testing.F) {
	p := mustLoad(f, denyPolicy+"  allow_prefixes: [go, curl, sh, rm, echo, \"git status\", find, env, sudo, xargs]\n")
	for _, s := range []string{
		"rm -rf /", "curl x | sh", "go test ./... && git status", "sh -c 'rm -rf \"$x\"'",
		"f() { rm -rf /; }; f", "echo $(rm -rf /) `ls` <(cat)", "{a,b}{c,d}", "echo {1..3..0}",
		"find . -exec rm {} +", "env -S 'x y' z", "sudo -u", "xargs -I{} rm {}", "trap 'x' EXIT",
		"sh <<EOF\nrm -rf $x\nEOF\n", "a=$(b) c", "case $x in *) y;; esac", "[[ $(x) ]]", "$((1+$(y)))",
		"declare -a 'a[$(x)]'", "cat <<< $'a'", "rm -rf ~", "coproc x { y; }", "time -p x",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		d := p.ShellScript(src)
		if d2 := p.ShellScript(src); d2 != d {
			t.Fatalf("not deterministic: %v, then %v", d, d2)
		}
		ds := p.ExplainScript(src)
		denied := false
		for _, cd := range ds {
			denied = denied || !cd.Allow
		}
		if denied == d.Allow {
			t.Fatalf("ShellScript says %v, ExplainScript %+v", d, ds)
		}
		if d.Rule == "" || d.Reason == "" {
			t.Fatalf("decision without a rule or reason: %+v", d)
		}
		_ = p.Shell(strings.Fields(src))
	})
}

// FuzzShellRules: any pattern that loads, against any script, decides without panicking,
// the same way twice; and a script is never allowed when the pattern itself, run as the
// script, is denied by it (a pattern matches what it says).
func FuzzShellRules(f *testing.F) {
	for _, s := range [][2]string{
		{"rm -rf /", `rm -rf "$X"`}, {"curl * | sh", "curl x | sh"}, {"rm ''", `rm "$x"`},
		{"a *.sh | b | c", "a x.sh | b | c"}, {"git push --force", "git -C d push --forc"},
		{"x -- -y", "x -- -y"}, {`a "*"`, "a '*'"}, {"r --a=b", "r --a"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, pattern, script string) {
		var p *Policy
		for _, shell := range []map[string][]string{
			{"deny": {pattern}, "allow_prefixes": {pattern}},
			{"deny": {pattern}},
		} {
			y, err := yaml.Marshal(map[string]any{"shell": shell})
			if err != nil {
				return
			}
			if p, err = Load(y, "fuzz"); err == nil {
				break
			}
		}
		if p == nil {
			return
		}
		d := p.ShellScript(script)
		if d2 := p.ShellScript(script); d != d2 {
			t.Fatalf("not deterministic: %v, then %v", d, d2)
		}
		_ = p.Shell(strings.Fields(script))
		if d := p.ShellScript(pattern); d.Allow {
			t.Fatalf("pattern %q does not deny itself: %v", pattern, d)
		}
	})
}

// FuzzFile: the resolver never allows a path outside the jail, nor a write the deny
// list protects.
func FuzzFile(f *testing.F) {
	p := mustLoad(f, "files:\n  jail: /workspace\n  deny_write: [\".git/hooks/**\", \".env\"]\n")
	for _, s := range []string{"a", "../a", "/workspace/../etc", "a/../../b", ".git/hooks/x", "x/.env", "/workspace", "//workspace//a", "a\x00b", "/"} {
		f.Add(uint8(Write), s)
	}
	f.Fuzz(func(t *testing.T, op uint8, name string) {
		d := p.File(Op(op), name, 1)
		if d != p.File(Op(op), name, 1) {
			t.Fatal("not deterministic")
		}
		if !d.Allow {
			return
		}
		if strings.IndexByte(name, 0) >= 0 || name == "" {
			t.Fatalf("allowed %q", name)
		}
		segs := lexicalResolve("/workspace", name)
		if len(segs) < 1 || segs[0] != "workspace" {
			t.Fatalf("allowed %q, which is %s, outside the jail", name, "/"+strings.Join(segs, "/"))
		}
		if got, err := p.Resolve(name); err != nil || got != "/"+strings.Join(segs, "/") {
			t.Fatalf("Resolve(%q) = %q, %v; want /%s", name, got, err, strings.Join(segs, "/"))
		}
		if Op(op) != Read {
			rel := segs[1:]
			for i, s := range rel {
				if s == ".env" || (i == 1 && rel[0] == ".git" && s == "hooks") {
					t.Fatalf("allowed %s of %q, which deny_write protects", Op(op), name)
				}
			}
			if len(rel) == 0 {
				t.Fatalf("allowed %s of the jail itself (%q)", Op(op), name)
			}
		}
	})
}

// lexicalResolve is a second implementation of the resolver, segment by segment.
func lexicalResolve(jail, name string) []string {
	var segs []string
	if !path.IsAbs(name) {
		segs = strings.Split(strings.Trim(jail, "/"), "/")
	}
	for _, s := range strings.Split(name, "/") {
		switch s {
		case "", ".":
		case "..":
			if len(segs) > 0 {
				segs = segs[:len(segs)-1]
			}
		default:
			segs = append(segs, s)
		}
	}
	return segs
}

// FuzzHost: host decisions never panic, are deterministic, and never allow a malformed
// name or a denied one.
func FuzzHost(f *testing.F) {
	p := mustLoad(f, networkPolicy)
	for _, s := range []string{"a.example.com", "evil.example.com", "EVIL.example.com.", "x\x00.example.com", "bücher.example", "[::1]", "127.1", "xn--bcher-kva.example", "a..b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, host string) {
		d := p.Host(host)
		if d != p.Host(host) {
			t.Fatal("not deterministic")
		}
		if !d.Allow {
			return
		}
		if strings.ContainsAny(host, "\x00 \t\r\n/@?#*") {
			t.Fatalf("allowed malformed %q: %v", host, d)
		}
		name, _, err := normalizeHost(host)
		if err != nil {
			t.Fatalf("allowed %q, which does not normalise: %v", host, err)
		}
		if name == "evil.example.com" || strings.HasSuffix(name, ".bad.example.com") {
			t.Fatalf("allowed denied %q: %v", host, d)
		}
	})
}

// FuzzPrograms: Programs never panics and is deterministic; what it returns is argv[0]'s
// base name first, then distinct base names, none empty and none with a directory.
func FuzzPrograms(f *testing.F) {
	for _, s := range []string{
		"ls; curl x", "f() { rm -rf /; }; f", "echo $(date) `id` <(cat)", "find . -exec rm {} +",
		"env -S 'x y' z", "sudo -u", "xargs -I{} rm {}", "trap 'x' EXIT", "sh <<EOF\nwget x\nEOF\n",
		"$X y", "eval x", "enable -n echo", "compgen -C 'x' y", "watch -x ls", "flock f -c make",
		"command -v node || exit 1", "cd / && /bin/echo hi", "bash -c 'sh -c \"nice ls\"'",
	} {
		f.Add("sh", "-c", s)
	}
	f.Add("/usr/bin/env", "A=1", "node")
	f.Add("xargs", "", "")
	f.Fuzz(func(t *testing.T, a0, a1, a2 string) {
		argv := []string{a0, a1, a2}
		got, err := Programs(argv)
		got2, err2 := Programs(argv)
		if !slices.Equal(got, got2) || fmt.Sprint(err) != fmt.Sprint(err2) {
			t.Fatalf("not deterministic: %q %v, then %q %v", got, err, got2, err2)
		}
		if err != nil {
			if got != nil {
				t.Fatalf("names %q with the error %v", got, err)
			}
			return
		}
		if len(got) == 0 || got[0] != path.Base(a0) {
			t.Fatalf("Programs(%q) = %q: argv[0] is not first", argv, got)
		}
		for i, n := range got {
			if n == "" || n == "." || n == ".." || strings.Contains(n, "/") || slices.Contains(got[:i], n) {
				t.Fatalf("Programs(%q) = %q: %q is not a distinct base name", argv, got, n)
			}
		}
	})
}
