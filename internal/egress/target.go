package egress

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"golang.org/x/net/idna"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// target is where a request asks to go, once parsed and found well-formed.
type target struct {
	// host is the lower-case name, or the address's canonical text (IPv6 without brackets)
	// when the request named an IP literal. It is what the Decider is asked about.
	host string
	// ip is the address when host is an IP literal, IPv4-mapped IPv6 forms unmapped.
	ip   netip.Addr
	port uint16
}

// authority is the target as host:port, IPv6 in brackets.
func (t target) authority() string {
	return joinHostPort(t.host, t.ip, t.port)
}

// hostHeader is the Host header for the target: the port is left out when it is the
// scheme's default.
func (t target) hostHeader(defaultPort uint16) string {
	if t.port == defaultPort {
		return joinHostPort(t.host, t.ip, 0)
	}
	return joinHostPort(t.host, t.ip, t.port)
}

func joinHostPort(host string, ip netip.Addr, port uint16) string {
	if ip.Is6() {
		host = "[" + host + "]"
	}
	if port == 0 {
		return host
	}
	return host + ":" + strconv.Itoa(int(port))
}

// maxAuthority bounds what is parsed: the longest name, brackets and ":65535".
const maxAuthority = 253 + 2 + 6

// malformed is the error for a host the proxy will not parse; its message is shown to the
// sandbox and quotes only what the sandbox sent, clipped.
func malformed(format string, args ...any) error {
	return fmt.Errorf(format+": %w", append(args, errdefs.ErrInvalidArgument)...)
}

// quote shows untrusted text in a message: Go-quoted (no control byte or newline gets
// through) and clipped.
func quote(s string) string {
	const max = 80
	if len(s) > max {
		return strconv.Quote(s[:max]) + "…"
	}
	return strconv.Quote(s)
}

// parseAuthority parses host[:port] as it appears in CONNECT's request target, an
// absolute URI or a Host header. With defaultPort 0 the port is required.
func parseAuthority(s string, defaultPort uint16) (target, error) {
	if s == "" {
		return target{}, malformed("empty host")
	}
	if len(s) > maxAuthority {
		return target{}, malformed("the host and port %s are %d bytes long, over %d", quote(s), len(s), maxAuthority)
	}
	if err := checkAuthorityBytes(s); err != nil {
		return target{}, err
	}
	host, portText, hasPort, err := splitAuthority(s)
	if err != nil {
		return target{}, err
	}
	t := target{port: defaultPort}
	if hasPort {
		if t.port, err = parsePort(portText); err != nil {
			return target{}, malformed("in %s: %v", quote(s), err)
		}
	} else if defaultPort == 0 {
		return target{}, malformed("%s has no port: CONNECT needs host:port", quote(s))
	}
	if t.host, t.ip, err = parseHost(host); err != nil {
		return target{}, err
	}
	return t, nil
}

// splitAuthority splits host and port, the host keeping its brackets.
func splitAuthority(s string) (host, port string, hasPort bool, err error) {
	if s[0] == '[' {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return "", "", false, malformed("%s has an unclosed bracket", quote(s))
		}
		host, rest := s[:end+1], s[end+1:]
		if rest == "" {
			return host, "", false, nil
		}
		if rest[0] != ':' {
			return "", "", false, malformed("%s has %s after the address, not a port", quote(s), quote(rest))
		}
		return host, rest[1:], true, nil
	}
	switch strings.Count(s, ":") {
	case 0:
		return s, "", false, nil
	case 1:
		host, port, _ := strings.Cut(s, ":")
		return host, port, true, nil
	}
	return "", "", false, malformed("%s: an IPv6 address must be in brackets, as in [2001:db8::1]:443", quote(s))
}

// checkAuthorityBytes refuses every byte that has no place in host[:port], each with the
// reason it is dangerous.
func checkAuthorityBytes(s string) error {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == 0:
			return malformed("host %s holds a NUL byte", quote(s))
		case c <= ' ' || c == 0x7f:
			return malformed("host %s holds a space or a control character", quote(s))
		case c >= 0x80:
			return malformed("host %s is not ASCII: send an internationalised name in its xn-- form", quote(s))
		case c == '%':
			return malformed("host %s holds '%%': percent-encoding and zone IDs are not accepted in a host", quote(s))
		case c == '@':
			return malformed("host %s holds '@': user information (user@host) is not accepted", quote(s))
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9',
			c == '.', c == '-', c == '_', c == ':', c == '[', c == ']':
		default:
			return malformed("host %s holds %q, which has no place in a host name", quote(s), c)
		}
	}
	return nil
}

// parsePort accepts a decimal port 1–65535 without leading zeros.
func parsePort(s string) (uint16, error) {
	switch {
	case s == "":
		return 0, errors.New("the port is empty")
	case len(s) > 5 || strings.Trim(s, "0123456789") != "":
		return 0, fmt.Errorf("the port %s is not a number from 1 to 65535", quote(s))
	case s[0] == '0':
		return 0, fmt.Errorf("the port %s is zero or has a leading zero", quote(s))
	}
	n, _ := strconv.Atoi(s)
	if n > 65535 {
		return 0, fmt.Errorf("the port %s is over 65535", quote(s))
	}
	return uint16(n), nil
}

// parseHost parses a host without a port: a bracketed IPv6 address, a dotted-quad IPv4
// address, or a host name, which it returns lower-cased. It refuses whatever another
// parser could read differently.
func parseHost(h string) (string, netip.Addr, error) {
	if h == "" {
		return "", netip.Addr{}, malformed("empty host")
	}
	if err := checkAuthorityBytes(h); err != nil {
		return "", netip.Addr{}, err
	}
	if h[0] == '[' {
		if len(h) < 2 || h[len(h)-1] != ']' {
			return "", netip.Addr{}, malformed("host %s has an unclosed bracket", quote(h))
		}
		ip, err := netip.ParseAddr(h[1 : len(h)-1])
		if err != nil || ip.Zone() != "" {
			return "", netip.Addr{}, malformed("host %s is not an IPv6 address in brackets", quote(h))
		}
		if !ip.Is6() {
			return "", netip.Addr{}, malformed("host %s: brackets are only for IPv6 addresses", quote(h))
		}
		ip = ip.Unmap()
		return ip.String(), ip, nil
	}
	if strings.ContainsAny(h, "[]") {
		return "", netip.Addr{}, malformed("host %s has a misplaced bracket", quote(h))
	}
	if strings.Contains(h, ":") {
		return "", netip.Addr{}, malformed("host %s: an IPv6 address must be in brackets", quote(h))
	}
	if ip, err := netip.ParseAddr(h); err == nil {
		return ip.String(), ip, nil // ParseAddr takes only dotted quads without leading zeros
	}
	name, err := checkName(h)
	return name, netip.Addr{}, err
}

// checkName checks an ASCII host name (RFC 1123 labels, plus '_', which real names use)
// and returns it lower-cased.
func checkName(h string) (string, error) {
	if len(h) > 253 {
		return "", malformed("host name %s is %d bytes long, over 253", quote(h), len(h))
	}
	if strings.HasSuffix(h, ".") {
		return "", malformed("host name %s ends with a dot: send it without", quote(h))
	}
	name := strings.ToLower(h)
	last := ""
	for rest := name; ; {
		label, tail, more := strings.Cut(rest, ".")
		switch {
		case label == "":
			return "", malformed("host name %s has an empty label", quote(h))
		case len(label) > 63:
			return "", malformed("host name %s has a label of %d bytes, over 63", quote(h), len(label))
		case label[0] == '-' || label[len(label)-1] == '-':
			return "", malformed("host name %s has a label that starts or ends with a hyphen", quote(h))
		}
		last = label
		if !more {
			break
		}
		rest = tail
	}
	if isNumeric(last) {
		return "", malformed("host %s is not a dotted-quad IPv4 address, but resolvers would read it as one", quote(h))
	}
	if strings.Contains(name, "xn--") {
		if a, err := idna.Lookup.ToASCII(name); err != nil || a != name {
			return "", malformed("host name %s is not a valid internationalised name", quote(h))
		}
	}
	return name, nil
}

// isNumeric reports whether a last label is a number in any base inet_aton reads
// (decimal, octal with a leading 0, hex with 0x): no top-level domain is, and a resolver
// may take such a name for an address (127.1, 0x7f.1, 2130706433).
func isNumeric(l string) bool {
	if hex, ok := strings.CutPrefix(l, "0x"); ok {
		return strings.Trim(hex, "0123456789abcdef") == ""
	}
	return strings.Trim(l, "0123456789") == ""
}

// parseAbsoluteURI parses a plain HTTP forward request's target, http://host[:port]/path?q,
// and returns where it goes and the origin-form target (/path?q) to send there.
func parseAbsoluteURI(method, raw string) (target, string, error) {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		if strings.HasPrefix(raw, "/") || raw == "*" {
			return target{}, "", malformed("this is a proxy: send the absolute URI (http://host/path), or CONNECT for HTTPS")
		}
		return target{}, "", malformed("the request target %s is not an absolute http:// URI", quote(raw))
	}
	switch strings.ToLower(scheme) {
	case "http":
	case "https":
		return target{}, "", malformed("https:// URIs are not forwarded: use CONNECT, as HTTPS clients do")
	default:
		return target{}, "", malformed("the scheme %s is not forwarded; only http:// is, and CONNECT", quote(scheme))
	}
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	authority, origin := rest[:end], rest[end:]
	if strings.IndexByte(origin, '#') >= 0 {
		return target{}, "", malformed("the request target has a fragment (#)")
	}
	t, err := parseAuthority(authority, 80)
	if err != nil {
		return target{}, "", err
	}
	for i := 0; i < len(origin); i++ {
		if c := origin[i]; c <= ' ' || c >= 0x7f {
			return target{}, "", malformed("the request target's path holds %q: escape it", c)
		}
	}
	switch {
	case origin == "" && method == "OPTIONS":
		origin = "*"
	case origin == "" || origin[0] == '?':
		origin = "/" + origin
	}
	return t, origin, nil
}
