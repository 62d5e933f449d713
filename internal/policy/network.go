package policy

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"go.yaml.in/yaml/v3"
	"golang.org/x/net/idna"
)

type networkRules struct {
	set          bool
	allowDefault bool
	allow, deny  []hostRule
	// requireCapability: every connection must carry a net: capability token for its host
	// (network.require_capability), on top of the rules.
	requireCapability bool
	// private are network.private's entries: hosts that may resolve to private addresses,
	// and ranges of private addresses that allowed hosts may be reached at (ranges, all
	// of the list's together).
	private []privateRule
	ranges  *PrivateRanges
}

// privateRule is one entry of network.private: a host (or *.suffix), or an address range.
type privateRule struct {
	host   hostRule
	prefix netip.Prefix
	// grant is what a host the entry names may reach: every address.
	grant *PrivateRanges
}

// everywhere is every address: what a host network.private names may be reached at.
var everywhere = []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")}

// hostRule is one entry of network.allow or network.deny.
type hostRule struct {
	src  string
	name string     // a normalised name; for a wildcard, the suffix ".example.com"
	ip   netip.Addr // for an address, which matches only itself
}

func (r *hostRule) matches(name string, ip netip.Addr) bool {
	switch {
	case ip.IsValid():
		return r.ip == ip
	case r.ip.IsValid():
		return false
	case r.name[0] == '.':
		return strings.HasSuffix(name, r.name)
	}
	return name == r.name
}

func (n *networkRules) summary() string {
	def := "deny"
	if n.allowDefault {
		def = "allow"
	}
	s := "network: default " + def
	if len(n.allow) > 0 {
		s += ", " + plural(len(n.allow), "allowed host", "allowed hosts")
	}
	if len(n.deny) > 0 {
		s += ", " + plural(len(n.deny), "denied host", "denied hosts")
	}
	if n.requireCapability {
		s += ", a net: capability required for every connection"
	}
	if len(n.private) > 0 {
		s += ", " + plural(len(n.private), "private host or range", "private hosts or ranges")
	}
	return s
}

func (l *loader) network(n *yaml.Node, r *networkRules) error {
	var allowNode *yaml.Node
	err := l.mapping(n, "network", []string{"default", "allow", "deny", "require_capability", "private"}, func(key string, _, v *yaml.Node) error {
		field := "network." + key
		if key == "require_capability" {
			if v.Kind != yaml.ScalarNode || v.Tag != "!!bool" {
				return l.errf(v, field, "want true or false, got %s", describe(v))
			}
			r.requireCapability = strings.EqualFold(v.Value, "true")
			return nil
		}
		if key == "default" {
			def, err := l.str(v, field)
			if err != nil {
				return err
			}
			if def != "allow" && def != "deny" {
				return l.errf(v, field, "%q: want allow or deny", def)
			}
			r.allowDefault = def == "allow"
			return nil
		}
		items, err := l.list(v, field)
		if err != nil {
			return err
		}
		if key == "private" {
			for _, it := range items {
				pr, err := compilePrivate(it.value)
				if err != nil {
					return l.errf(it.node, it.field, "%q: %v", it.value, err)
				}
				if pr.prefix.IsValid() {
					if r.ranges == nil {
						r.ranges = &PrivateRanges{Rule: "network.private"}
					}
					r.ranges.Prefixes = append(r.ranges.Prefixes, pr.prefix)
				} else {
					pr.grant = &PrivateRanges{Rule: it.field, Prefixes: everywhere}
				}
				r.private = append(r.private, pr)
			}
			return nil
		}
		for _, it := range items {
			h, err := compileHost(it.value)
			if err != nil {
				return l.errf(it.node, it.field, "%q: %v", it.value, err)
			}
			if key == "allow" {
				r.allow, allowNode = append(r.allow, h), v
			} else {
				r.deny = append(r.deny, h)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if r.allowDefault && len(r.allow) > 0 {
		return l.errf(allowNode, "network.allow", "with default: allow, an allow list decides nothing; set default: deny, or remove the list")
	}
	r.set = !isNull(n)
	return nil
}

// compilePrivate reads an entry of network.private: an address range ("10.20.0.0/16", an
// address alone being its own range) or a host as in network.allow.
func compilePrivate(s string) (privateRule, error) {
	if p, err := netip.ParsePrefix(s); err == nil {
		if p.Addr().Zone() != "" || p.Bits() < 8 && p.Addr().Is4() || p.Bits() < 16 && p.Addr().Is6() {
			return privateRule{}, errors.New("a range wider than /8 (IPv4) or /16 (IPv6) opens too much; list the registry's own range")
		}
		return privateRule{prefix: p.Masked()}, nil
	}
	if a, err := netip.ParseAddr(s); err == nil && a.Zone() == "" {
		return privateRule{prefix: netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())}, nil
	}
	h, err := compileHost(s)
	if err != nil {
		return privateRule{}, fmt.Errorf("want a host (registry.corp.example, *.corp.example) or an address range (10.20.0.0/16): %v", err)
	}
	return privateRule{host: h}, nil
}

// privateFor is what of network.private applies to an allowed host: the entry naming
// it, else the list's ranges.
func (n *networkRules) privateFor(name string, ip netip.Addr) *PrivateRanges {
	for _, pr := range n.private {
		if pr.grant != nil && pr.host.matches(name, ip) {
			return pr.grant
		}
	}
	return n.ranges
}

func compileHost(s string) (hostRule, error) {
	r := hostRule{src: s}
	switch {
	case s == "*":
		return r, errors.New("a bare * would match every host; use default: allow")
	case strings.Contains(s, "/"):
		if _, err := netip.ParsePrefix(s); err == nil {
			return r, errors.New("address ranges are not supported; list addresses one by one")
		}
	}
	rest, wildcard := strings.CutPrefix(s, "*.")
	if strings.Contains(rest, "*") {
		return r, errors.New("a wildcard is only allowed as the whole first label, as in *.example.com")
	}
	name, ip, err := normalizeHost(rest)
	if err != nil {
		return r, err
	}
	if wildcard && ip.IsValid() {
		return r, errors.New("a wildcard cannot apply to an address")
	}
	r.name, r.ip = name, ip
	if wildcard {
		r.name = "." + name
	}
	return r, nil
}

// Host decides whether host may be reached: network.deny, then network.allow, then
// network.default. A malformed name is denied.
func (p *Policy) Host(host string) Decision {
	name, ip, err := normalizeHost(host)
	if err != nil {
		return deny("network", "malformed host %s: %v", quoteCommand(host), err)
	}
	show := name
	if ip.IsValid() {
		show = ip.String()
	}
	n := &p.network
	for i := range n.deny {
		if n.deny[i].matches(name, ip) {
			return deny(fmt.Sprintf("network.deny[%d]", i), "%s matches %q", show, n.deny[i].src)
		}
	}
	var d Decision
	for i := range n.allow {
		if n.allow[i].matches(name, ip) {
			d = allow(fmt.Sprintf("network.allow[%d]", i), "%s matches %q", show, n.allow[i].src)
			break
		}
	}
	switch {
	case d.Allow:
	case !n.set:
		return deny("network.default", "%s: the policy has no network section, and the default is deny", show)
	case n.allowDefault:
		d = allow("network.default", "%s is not listed, and the default is allow", show)
	default:
		return deny("network.default", "%s is not on the allow list, and the default is deny", show)
	}
	d.RequireCapability = n.requireCapability
	d.Private = n.privateFor(name, ip)
	return d
}

// normalizeHost returns a host's canonical name (lower case, no trailing dot, A-labels
// for internationalised names), or its address when it is an IP literal.
func normalizeHost(h string) (string, netip.Addr, error) {
	if h == "" {
		return "", netip.Addr{}, errors.New("empty name")
	}
	if len(h) > 2 && h[0] == '[' && h[len(h)-1] == ']' {
		ip, err := netip.ParseAddr(h[1 : len(h)-1])
		if err != nil || !ip.Is6() || ip.Zone() != "" {
			return "", netip.Addr{}, errors.New("not an IPv6 address in brackets")
		}
		return "", ip.Unmap(), nil
	}
	if ip, err := netip.ParseAddr(h); err == nil {
		if ip.Zone() != "" {
			return "", netip.Addr{}, errors.New("an address with a zone is not a host")
		}
		return "", ip.Unmap(), nil
	}
	ascii := true
	for i := 0; i < len(h); i++ {
		switch c := h[i]; {
		case c <= ' ' || c == 0x7f:
			return "", netip.Addr{}, errors.New("holds a space, a NUL or another control character")
		case c >= 0x80:
			ascii = false
		case strings.IndexByte(`/\@:?#%[]*<>"'|^{}`+"`", c) >= 0:
			return "", netip.Addr{}, fmt.Errorf("holds %q: want a bare host name, without a scheme, user, port or path", c)
		}
	}
	h = strings.TrimSuffix(h, ".")
	if !ascii {
		// Only canonical names: one that lookup mapping would change (a zero-width
		// space dropped, a decomposed ü composed, a full-width dot) is refused, so the
		// name decided is the name any resolver will look up.
		if u, err := idna.Lookup.ToUnicode(h); err == nil && u != strings.ToLower(h) {
			return "", netip.Addr{}, fmt.Errorf("not in canonical form (lookup would read it as %q)", u)
		}
	}
	if !ascii || strings.Contains(strings.ToLower(h), "xn--") {
		a, err := idna.Lookup.ToASCII(h)
		if err != nil {
			return "", netip.Addr{}, fmt.Errorf("not a valid internationalised name: %v", err)
		}
		h = a
	}
	h = strings.ToLower(h)
	if len(h) > 253 {
		return "", netip.Addr{}, fmt.Errorf("%d bytes long, over 253", len(h))
	}
	last := ""
	for rest := h; ; {
		label, tail, more := strings.Cut(rest, ".")
		if err := checkLabel(label); err != nil {
			return "", netip.Addr{}, err
		}
		last = label
		if !more {
			break
		}
		rest = tail
	}
	if isDigits(last) || (strings.HasPrefix(last, "0x") && strings.Trim(last[2:], "0123456789abcdef") == "") {
		return "", netip.Addr{}, errors.New("its last label is a number: resolvers would read it as an IP address")
	}
	return h, netip.Addr{}, nil
}

func checkLabel(l string) error {
	switch {
	case l == "":
		return errors.New("has an empty label")
	case len(l) > 63:
		return fmt.Errorf("has a label of %d bytes, over 63", len(l))
	case l[0] == '-' || l[len(l)-1] == '-':
		return fmt.Errorf("label %q starts or ends with a hyphen", l)
	}
	for i := 0; i < len(l); i++ {
		c := l[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return fmt.Errorf("label %q holds %q: names are letters, digits, - and _", l, c)
		}
	}
	return nil
}
