package capability

import (
	"errors"
	"fmt"
	"net/netip"
	"path"
	"strings"
)

// kind is a resource's scheme.
type kind uint8

const (
	kindFile kind = iota + 1
	kindExec
	kindNet
)

var schemes = [...]string{kindFile: "file:", kindExec: "exec:", kindNet: "net:"}

// MaxResourceLen bounds a resource string, scheme included: a file path up to Linux's
// PATH_MAX, and a little.
const MaxResourceLen = 4096 + len("file:")

// resource is a parsed resource in canonical form: a cleaned absolute path, a program
// name or "*", a lower-case host name, "*." and a host name, or an IP address ("[…]" for
// IPv6). The zero value is "no resource".
type resource struct {
	kind kind
	v    string
}

func (r resource) String() string {
	if r.kind == 0 {
		return ""
	}
	return schemes[r.kind] + r.v
}

// parseResource reads s into its canonical form. grant is true for what a token holds,
// which may be a wildcard (exec:*, net:*.example.com); a request names one concrete thing.
func parseResource(s string, grant bool) (resource, error) {
	if len(s) > MaxResourceLen {
		return resource{}, fmt.Errorf("%d bytes long, over %d", len(s), MaxResourceLen)
	}
	for k := kindFile; k <= kindNet; k++ {
		rest, ok := strings.CutPrefix(s, schemes[k])
		if !ok {
			continue
		}
		var v string
		var err error
		switch k {
		case kindFile:
			v, err = cleanPath(rest)
		case kindExec:
			v, err = checkProgram(rest, grant)
		case kindNet:
			v, err = normalizeHost(rest, grant)
		}
		if err != nil {
			return resource{}, fmt.Errorf("%s %w", quote(s), err)
		}
		return resource{kind: k, v: v}, nil
	}
	return resource{}, fmt.Errorf("%s: want file:/absolute/path, exec:program or net:host", quote(s))
}

// quote shows a resource in an error: as it is when that is unambiguous, Go-quoted when
// it holds a space, a quote or a byte that is not printable ASCII.
func quote(s string) string {
	if s == "" {
		return `""`
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f || c == '"' || c == '\\' {
			return fmt.Sprintf("%q", s)
		}
	}
	return s
}

// cleanPath checks an absolute path and cleans it ("//" and "." segments and a trailing
// slash go). A ".." segment is refused rather than resolved: it means the caller did not
// resolve the path, and the verifier does not guess what the caller meant.
func cleanPath(p string) (string, error) {
	switch {
	case p == "":
		return "", errors.New("has an empty path")
	case p[0] != '/':
		return "", errors.New("is not an absolute path")
	case strings.IndexByte(p, 0) >= 0:
		return "", errors.New("holds a NUL byte")
	}
	for seg := range strings.SplitSeq(p, "/") {
		if seg == ".." {
			return "", errors.New("holds a .. segment: resolve the path first")
		}
	}
	return path.Clean(p), nil
}

// checkProgram checks a program's base name: letters, digits, '.', '_', '+' and '-', not
// "." or "..", at most 255 bytes; "*" (any program) in a grant.
func checkProgram(p string, grant bool) (string, error) {
	switch {
	case p == "*" && grant:
		return p, nil
	case p == "*":
		return "", errors.New("is a wildcard: a request names one program")
	case p == "":
		return "", errors.New("has no program name")
	case strings.Contains(p, "/"):
		return "", errors.New("holds a /: want a program's base name, like node")
	case p == "." || p == "..":
		return "", errors.New("is not a program name")
	case len(p) > 255:
		return "", errors.New("has a program name over 255 bytes")
	}
	for i := 0; i < len(p); i++ {
		if c := p[i]; !(isAlnum(c) || c == '.' || c == '_' || c == '+' || c == '-') {
			return "", fmt.Errorf("holds %q: program names are letters, digits, '.', '_', '+' and '-'", c)
		}
	}
	return p, nil
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// normalizeHost returns a host's canonical form: a lower-case ASCII name without a
// trailing dot, "*." and such a name (in a grant), or an IP address ("[…]" for IPv6,
// IPv4-mapped IPv6 as IPv4). Internationalised names must come in their xn-- form.
func normalizeHost(h string, grant bool) (string, error) {
	rest, wildcard := strings.CutPrefix(h, "*.")
	if wildcard && !grant {
		return "", errors.New("is a wildcard: a request names one host")
	}
	if ip, ok, err := parseIP(rest); ok || err != nil {
		switch {
		case err != nil:
			return "", err
		case wildcard:
			return "", errors.New("puts a wildcard on an address")
		case ip.Is6():
			return "[" + ip.String() + "]", nil
		}
		return ip.String(), nil
	}
	name := strings.ToLower(strings.TrimSuffix(rest, "."))
	switch {
	case h == "*" && grant:
		return "", errors.New("is a bare *: grant hosts one by one or as *.example.com")
	case strings.Contains(name, "*"):
		return "", errors.New("holds a * that is not the whole first label, as in *.example.com")
	case name == "":
		return "", errors.New("has no host name")
	case len(name) > 253:
		return "", fmt.Errorf("has a host name of %d bytes, over 253", len(name))
	}
	last := ""
	for label := range strings.SplitSeq(name, ".") {
		if err := checkLabel(label); err != nil {
			return "", err
		}
		last = label
	}
	if strings.Trim(last, "0123456789") == "" || strings.HasPrefix(last, "0x") && strings.Trim(last[2:], "0123456789abcdef") == "" {
		return "", errors.New("has a numeric last label: resolvers would read it as an address")
	}
	if wildcard {
		return "*." + name, nil
	}
	return name, nil
}

// parseIP reads an IP literal; ok is false, with no error, when s is not one.
func parseIP(s string) (ip netip.Addr, ok bool, err error) {
	if len(s) >= 2 && s[0] == '[' && s[len(s)-1] == ']' {
		ip, err := netip.ParseAddr(s[1 : len(s)-1])
		if err != nil || !ip.Is6() {
			return ip, false, errors.New("has brackets around something that is not an IPv6 address")
		}
		s = s[1 : len(s)-1]
	}
	ip, err = netip.ParseAddr(s)
	if err != nil {
		return ip, false, nil
	}
	if ip.Zone() != "" {
		return ip, false, errors.New("is an address with a zone")
	}
	return ip.Unmap(), true, nil
}

func checkLabel(l string) error {
	switch {
	case l == "":
		return errors.New("has an empty label")
	case len(l) > 63:
		return fmt.Errorf("has a label of %d bytes, over 63", len(l))
	case l[0] == '-' || l[len(l)-1] == '-':
		return fmt.Errorf("has a label that starts or ends with '-'")
	}
	for i := 0; i < len(l); i++ {
		if c := l[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return fmt.Errorf("holds %q: host names are letters, digits, '-' and '_' (xn-- for others)", c)
		}
	}
	return nil
}

// covers says whether the grant g includes the concrete resource r.
func (g resource) covers(r resource) bool {
	if g.kind != r.kind {
		return false
	}
	switch g.kind {
	case kindFile:
		return r.v == g.v || g.v == "/" || strings.HasPrefix(r.v, g.v) && r.v[len(g.v)] == '/'
	case kindExec:
		return g.v == "*" || g.v == r.v
	case kindNet:
		if suffix, ok := strings.CutPrefix(g.v, "*"); ok {
			// ".example.com": any name under it, never an address (which would not end
			// so) nor the bare name.
			return strings.HasSuffix(r.v, suffix)
		}
		return g.v == r.v
	}
	return false
}
