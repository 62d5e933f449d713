package egress

import (
	"net/netip"
	"strings"
	"testing"
)

func TestForbidden(t *testing.T) {
	tests := []struct {
		addr string
		want string // "" when allowed
	}{
		{"127.0.0.1", "loopback"},
		{"127.255.255.254", "loopback"},
		{"0.0.0.0", "unspecified"},
		{"0.1.2.3", "unspecified"},
		{"10.1.2.3", "private"},
		{"172.16.0.1", "private"},
		{"172.31.255.255", "private"},
		{"192.168.1.1", "private"},
		{"100.64.0.1", "carrier-grade NAT"},
		{"100.127.255.255", "carrier-grade NAT"},
		{"169.254.1.1", "link-local"},
		{"169.254.169.254", "cloud metadata"},
		{"169.254.170.2", "ECS task metadata"},
		{"100.100.100.200", "Alibaba"},
		{"168.63.129.16", "Azure"},
		{"192.0.0.192", "Oracle"},
		{"224.0.0.1", "multicast"},
		{"239.255.255.250", "multicast"},
		{"255.255.255.255", "broadcast"},
		{"240.0.0.1", "reserved"},
		{"192.0.2.1", "documentation"},
		{"198.18.0.1", "benchmarking"},
		{"::", "unspecified"},
		{"::1", "loopback"},
		{"::127.0.0.1", "IPv4-compatible"},
		{"::ffff:127.0.0.1", "loopback"},
		{"::ffff:169.254.169.254", "cloud metadata"},
		{"::ffff:10.0.0.1", "private"},
		{"64:ff9b::7f00:1", "NAT64 form of 127.0.0.1"},
		{"64:ff9b::a9fe:a9fe", "NAT64 form of 169.254.169.254, which is a cloud metadata"},
		{"64:ff9b::a00:1", "NAT64 form of 10.0.0.1"},
		{"64:ff9b:1::1", "local-use NAT64"},
		{"2002:7f00:1::1", "6to4"},
		{"2001::1", "Teredo"},
		{"2001:db8::1", "documentation"},
		{"fc00::1", "unique local"},
		{"fd12:3456::1", "unique local"},
		{"fd00:ec2::254", "AWS IPv6 metadata"},
		{"fe80::1", "link-local"},
		{"fe80::1%eth0", "link-local"},
		{"fec0::1", "site-local"},
		{"ff02::1", "multicast"},
		{"100::1", "discard-only"},

		{"8.8.8.8", ""},
		{"1.1.1.1", ""},
		{"93.184.216.34", ""},
		{"100.63.255.255", ""},
		{"100.128.0.0", ""},
		{"172.32.0.1", ""},
		{"2606:4700:4700::1111", ""},
		{"64:ff9b::808:808", ""}, // NAT64 of 8.8.8.8
		{"::ffff:8.8.8.8", ""},
	}
	for _, tt := range tests {
		got := forbidden(netip.MustParseAddr(tt.addr))
		if (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
			t.Errorf("forbidden(%s) = %q, want %q", tt.addr, got, tt.want)
		}
	}
	if forbidden(netip.Addr{}) == "" {
		t.Error("the zero Addr is not forbidden")
	}
}

func TestAddrPolicy(t *testing.T) {
	p := &addrPolicy{allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")}}
	if why := p.check(netip.MustParseAddr("127.0.0.2"), nil); why != "" {
		t.Errorf("an exempted address is refused: %s", why)
	}
	if why := p.check(netip.MustParseAddr("::ffff:127.0.0.2"), nil); why != "" {
		t.Errorf("an exempted address, mapped, is refused: %s", why)
	}
	if why := p.check(netip.MustParseAddr("127.0.0.1"), nil); why == "" {
		t.Error("loopback outside the exemption is allowed")
	}
	// The host's own addresses are refused even when public: services listening on
	// 0.0.0.0 answer there.
	local, err := interfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range local {
		if forbidden(a) == "" {
			if why := p.check(a, nil); !strings.Contains(why, "this host") {
				t.Errorf("the host's own %s: %q", a, why)
			}
			return
		}
	}
	t.Log("this host has no address outside the fixed ranges; the own-address check was not exercised")
}
