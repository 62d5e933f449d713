package egress

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"
)

// addrRange is a range of addresses the proxy never connects to, and why.
type addrRange struct {
	prefix netip.Prefix
	why    string
}

// forbiddenRanges are checked in order, so that the most precise reason comes first
// (169.254.169.254 is a metadata endpoint before it is link-local). IPv4-mapped IPv6
// addresses are unmapped before the check; NAT64 addresses are judged by the IPv4
// address they embed.
var forbiddenRanges = func() []addrRange {
	rs := []struct{ cidr, why string }{
		// Cloud metadata and platform endpoints: credentials live here.
		{"169.254.169.254/32", "a cloud metadata endpoint (AWS, GCP, Azure, OpenStack and others)"},
		{"169.254.170.2/32", "the AWS ECS task metadata endpoint"},
		{"169.254.169.253/32", "the AWS VPC DNS resolver"},
		{"169.254.169.123/32", "the AWS time service"},
		{"fd00:ec2::254/128", "the AWS IPv6 metadata endpoint"},
		{"fd00:ec2::253/128", "the AWS IPv6 DNS resolver"},
		{"100.100.100.200/32", "the Alibaba Cloud metadata endpoint"},
		{"168.63.129.16/32", "the Azure WireServer (platform endpoint)"},
		{"192.0.0.192/32", "the Oracle Cloud metadata endpoint"},

		{"0.0.0.0/8", "unspecified (\"this network\"; 0.0.0.0 reaches this host)"},
		{"127.0.0.0/8", "loopback"},
		{"10.0.0.0/8", "private (RFC 1918)"},
		{"172.16.0.0/12", "private (RFC 1918)"},
		{"192.168.0.0/16", "private (RFC 1918)"},
		{"100.64.0.0/10", "shared address space (carrier-grade NAT, RFC 6598)"},
		{"169.254.0.0/16", "link-local"},
		{"192.0.0.0/24", "IETF protocol assignments"},
		{"192.0.2.0/24", "documentation (TEST-NET-1)"},
		{"198.51.100.0/24", "documentation (TEST-NET-2)"},
		{"203.0.113.0/24", "documentation (TEST-NET-3)"},
		{"192.88.99.0/24", "the deprecated 6to4 relay anycast"},
		{"198.18.0.0/15", "benchmarking (RFC 2544)"},
		{"224.0.0.0/4", "multicast"},
		{"255.255.255.255/32", "broadcast"},
		{"240.0.0.0/4", "reserved"},

		{"::/128", "unspecified"},
		{"::1/128", "loopback"},
		{"::/96", "IPv4-compatible IPv6 (deprecated)"},
		{"64:ff9b:1::/48", "local-use NAT64 (RFC 8215)"},
		{"100::/64", "discard-only (RFC 6666)"},
		{"2001::/32", "Teredo (it embeds an IPv4 address)"},
		{"2001:2::/48", "benchmarking (RFC 5180)"},
		{"2001:db8::/32", "documentation"},
		{"2002::/16", "6to4 (deprecated; it embeds an IPv4 address)"},
		{"fc00::/7", "unique local (private, RFC 4193)"},
		{"fe80::/10", "link-local"},
		{"fec0::/10", "site-local (deprecated)"},
		{"ff00::/8", "multicast"},
	}
	out := make([]addrRange, len(rs))
	for i, r := range rs {
		out[i] = addrRange{netip.MustParsePrefix(r.cidr), r.why}
	}
	return out
}()

// platformRanges is how many of forbiddenRanges, first, are cloud metadata and platform
// endpoints.
const platformRanges = 9

// nat64 is the NAT64 well-known prefix (RFC 6052): 64:ff9b::a.b.c.d reaches a.b.c.d
// through a translator, so it is judged as a.b.c.d.
var nat64 = netip.MustParsePrefix("64:ff9b::/96")

// forbidden says why the proxy must not connect to a, or "" when nothing forbids it.
// It knows only fixed ranges; the host's own addresses are checked by [addrPolicy].
func forbidden(a netip.Addr) string {
	a = a.Unmap().WithZone("")
	if !a.IsValid() {
		return "not an address"
	}
	if nat64.Contains(a) {
		b := a.As16()
		v4 := netip.AddrFrom4([4]byte(b[12:]))
		if why := forbidden(v4); why != "" {
			return fmt.Sprintf("the NAT64 form of %s, which is %s", v4, why)
		}
		return ""
	}
	for _, r := range forbiddenRanges {
		if r.prefix.Contains(a) {
			return r.why
		}
	}
	return ""
}

// addrPolicy decides addresses: the fixed ranges, the host's own interface addresses,
// and the test-only exemptions.
type addrPolicy struct {
	allow []netip.Prefix // Options.UnsafeAllowAddrs
	local localAddrs
}

// check says why the proxy must not connect to a, or "" when it may. private are ranges
// the policy opens for the host (network.private): they lift every check but the cloud
// metadata and platform endpoints, where credentials live.
func (p *addrPolicy) check(a netip.Addr, private []netip.Prefix) string {
	a = a.Unmap().WithZone("")
	for _, pre := range p.allow {
		if pre.Contains(a) {
			return ""
		}
	}
	why := forbidden(a)
	if why == "" && p.local.has(a) {
		why = "an address of this host (its services are not the internet)"
	}
	if why == "" || isPlatform(a) {
		return why
	}
	for _, pre := range private {
		if pre.Contains(a) {
			return ""
		}
	}
	return why
}

// isPlatform reports whether a is a cloud metadata or platform endpoint: never reached,
// whatever network.private says.
func isPlatform(a netip.Addr) bool {
	for _, r := range forbiddenRanges[:platformRanges] {
		if r.prefix.Contains(a) {
			return true
		}
	}
	if nat64.Contains(a) {
		b := a.As16()
		return isPlatform(netip.AddrFrom4([4]byte(b[12:])))
	}
	return false
}

// localAddrs are the addresses of this host's interfaces, read again at most every
// localTTL: a host service listening on 0.0.0.0 answers on the host's public address too,
// and a policy that allows a name resolving there must not open it to the sandbox.
type localAddrs struct {
	mu    sync.Mutex
	at    time.Time
	addrs []netip.Addr
}

const localTTL = 5 * time.Second

func (l *localAddrs) has(a netip.Addr) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now := time.Now(); now.Sub(l.at) > localTTL {
		// On an error the last list stays: the fixed ranges still hold meanwhile.
		if addrs, err := interfaceAddrs(); err == nil {
			l.addrs, l.at = addrs, now
		}
	}
	return slices.Contains(l.addrs, a)
}

func interfaceAddrs() ([]netip.Addr, error) {
	ifas, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	out := make([]netip.Addr, 0, len(ifas))
	for _, ifa := range ifas {
		if n, ok := ifa.(*net.IPNet); ok {
			if a, ok := netip.AddrFromSlice(n.IP); ok {
				out = append(out, a.Unmap())
			}
		}
	}
	return out, nil
}
