// Package origins names the hosts that sandboxes' pages are served on, apart from the
// control plane's, and hands a signed-in browser onto them.
//
// Every host under the apps domain is one origin: a sandbox's app (app-<sandbox ID>), its
// desktop (desktop-<sandbox ID>, reserved), and each user's two role entry points
// (live-<user ID>, dev-<user ID>), which serve whichever sandbox owns that role now. No
// two users share one, and the control plane is never one of them.
//
// Threat model: script on an app host is hostile. It must not act as the user on the
// control plane, nor reach another host's sandbox. A browser reaches an app host only
// through a handoff: the control plane, which sees its session, gives it a single-use code
// (60 s) bound to that host and user; the app host exchanges the code for a cookie that
// only that host accepts. The code and cookie are random and kept here, server side, so a
// cookie tossed onto another host (Domain=<apps domain>) is refused there.
package origins

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strings"

	"golang.org/x/net/publicsuffix"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// DefaultAppsDomain serves a local install: browsers resolve every name under
// localhost to loopback, and none of them is the control plane's 127.0.0.1.
const DefaultAppsDomain = "localhost"

// Kind is what an apps host serves.
type Kind string

// The kinds of apps hosts and their label prefixes.
const (
	KindApp     Kind = "app"     // app-<sandbox ID>: that sandbox's app
	KindDesktop Kind = "desktop" // desktop-<sandbox ID>: reserved for the sandbox's desktop
	KindLive    Kind = "live"    // live-<user ID>: the user's live sandbox's app
	KindDev     Kind = "dev"     // dev-<user ID>: the user's dev sandbox's app
)

// Host is a parsed apps host.
type Host struct {
	Kind Kind
	// ID is the sandbox's ID (app, desktop) or the user's (live, dev).
	ID string
}

// Label is the host's first DNS label.
func (h Host) Label() string { return string(h.Kind) + "-" + h.ID }

// ParseLabel reads a first DNS label as an apps host. Labels are compared in lower case,
// as DNS does; IDs are lower case.
func ParseLabel(label string) (Host, error) {
	label = strings.ToLower(label)
	for _, k := range []Kind{KindApp, KindDesktop, KindLive, KindDev} {
		id, ok := strings.CutPrefix(label, string(k)+"-")
		if !ok {
			continue
		}
		if k == KindApp || k == KindDesktop {
			if !validSandboxID(id) {
				break
			}
		} else if !validUserID(id) {
			break
		}
		return Host{Kind: k, ID: id}, nil
	}
	return Host{}, fmt.Errorf("host %q: want app-<sandbox>, desktop-<sandbox>, live-<user> or dev-<user>: %w", errdefs.Clip(label, 80), errdefs.ErrNotFound)
}

// validSandboxID is sb- and 10 characters of a-z2-7 (runner.ValidID's form).
func validSandboxID(id string) bool {
	rest, ok := strings.CutPrefix(id, "sb-")
	if !ok || len(rest) != 10 {
		return false
	}
	for _, c := range []byte(rest) {
		if !(c >= 'a' && c <= 'z' || c >= '2' && c <= '7') {
			return false
		}
	}
	return true
}

// validUserID is 32 lower-case hex digits (store.NewID's form).
func validUserID(id string) bool {
	if len(id) != 32 {
		return false
	}
	for _, c := range []byte(id) {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// Config places the control plane and the apps domain.
type Config struct {
	// AppsDomain is the DNS name whose subdomains serve sandboxes (default localhost).
	AppsDomain string
	// PublicURL is the control plane's URL as browsers reach it ("https://paddock.example.com").
	// Empty: http://127.0.0.1 on the port each request came to, and app hosts on that
	// port too (a local install).
	PublicURL string
}

// Origins resolves hosts against a checked Config. The zero value is not usable: use New.
type Origins struct {
	apps   string // lower case, no port
	scheme string // of the control plane and the app hosts
	host   string // the control plane's host name, lower case
	port   string // the control plane's and app hosts' port; "" with fromRequest
	// fromRequest takes the port from each request (no PublicURL).
	fromRequest bool
}

// New checks c: the apps domain is a DNS name, and a different site from the control
// plane's host, so that nothing an app host sets for its parent domain reaches the
// control plane. Errors name the config field.
func New(c Config) (*Origins, error) {
	apps := strings.ToLower(strings.TrimSuffix(c.AppsDomain, "."))
	if apps == "" {
		apps = DefaultAppsDomain
	}
	if err := checkDomain(apps); err != nil {
		return nil, fmt.Errorf("apps_domain: %w", err)
	}
	o := &Origins{apps: apps, scheme: "http", host: "127.0.0.1", fromRequest: true}
	if c.PublicURL != "" {
		u, err := url.Parse(c.PublicURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || u.User != nil ||
			(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
			return nil, fmt.Errorf("public_url: %q: want http(s)://host[:port] with no path: %w", c.PublicURL, errdefs.ErrInvalidArgument)
		}
		o.scheme, o.host, o.port, o.fromRequest = u.Scheme, strings.ToLower(u.Hostname()), u.Port(), false
	}
	if err := sameSite(o.host, apps); err != nil {
		return nil, err
	}
	return o, nil
}

// checkDomain accepts a DNS name of letters, digits and hyphens; not an IP address.
func checkDomain(d string) error {
	if net.ParseIP(d) != nil || len(d) > 200 {
		return fmt.Errorf("%q: want a DNS name (such as apps.example.net), not an address: %w", d, errdefs.ErrInvalidArgument)
	}
	for l := range strings.SplitSeq(d, ".") {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return fmt.Errorf("%q: want a DNS name such as apps.example.net: %w", d, errdefs.ErrInvalidArgument)
		}
		for _, c := range []byte(l) {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return fmt.Errorf("%q: want a DNS name such as apps.example.net: %w", d, errdefs.ErrInvalidArgument)
			}
		}
	}
	return nil
}

// sameSite refuses an apps domain that is the control plane's site: a page on an app host
// could then set cookies the control plane reads (cookie tossing) and its requests would
// count as same-site. An IP address has no site to share.
func sameSite(controlHost, apps string) error {
	if controlHost == apps || strings.HasSuffix(controlHost, "."+apps) {
		return fmt.Errorf("apps_domain %q: the control plane's host %q is inside it; serve the control plane on another name (public_url) or pick another apps_domain: %w",
			apps, controlHost, errdefs.ErrInvalidArgument)
	}
	if net.ParseIP(controlHost) != nil {
		return nil
	}
	if a, c := Site(apps), Site(controlHost); a == c {
		return fmt.Errorf("apps_domain %q and the control plane's host %q (public_url) are the same site %q: pages on app hosts could set cookies for the control plane; use a registrable domain of its own for apps (e.g. example-apps.net for example.com): %w",
			apps, controlHost, a, errdefs.ErrInvalidArgument)
	}
	return nil
}

// Site is a host's registrable domain (eTLD+1, by the public suffix list), the unit
// browsers scope SameSite and cookies by; the host itself when it has none.
func Site(host string) string {
	if s, err := publicsuffix.EffectiveTLDPlusOne(host); err == nil {
		return s
	}
	return host
}

// Scheme is the scheme of the control plane's URL and of the app hosts'.
func (o *Origins) Scheme() string { return o.scheme }

// AppsDomain is the checked apps domain.
func (o *Origins) AppsDomain() string { return o.apps }

// portFor is the port of the URLs given in answer to a request that came to reqHost: the
// configured one, or the request's own.
func (o *Origins) portFor(reqHost string) string {
	if !o.fromRequest {
		return o.port
	}
	_, p, err := net.SplitHostPort(reqHost)
	if err != nil {
		return ""
	}
	return p
}

func withPort(host, port string) string {
	if port == "" {
		return host
	}
	return net.JoinHostPort(host, port)
}

// ControlURL is the control plane's base URL ("http://127.0.0.1:8080"), for an answer to
// a request that came to reqHost.
func (o *Origins) ControlURL(reqHost string) string {
	return o.scheme + "://" + withPort(o.host, o.portFor(reqHost))
}

// URL is h's base URL ("http://live-<user>.localhost:8080"), for an answer to a request
// that came to reqHost.
func (o *Origins) URL(h Host, reqHost string) string {
	return o.scheme + "://" + withPort(h.Label()+"."+o.apps, o.portFor(reqHost))
}

// Where is where a request's Host points.
type Where int

const (
	// Control is the control plane: any host outside the apps domain.
	Control Where = iota
	// Apps is a host under the apps domain; Lookup's Host says which.
	Apps
	// AppsParent is the apps domain itself, or a name under it that is no apps host:
	// nothing is served there.
	AppsParent
)

// Lookup places a request's Host header.
func (o *Origins) Lookup(reqHost string) (Where, Host, error) {
	name := strings.ToLower(reqHost)
	if h, _, err := net.SplitHostPort(name); err == nil {
		name = h
	}
	name = strings.TrimSuffix(name, ".")
	if name == o.apps {
		return AppsParent, Host{}, nil
	}
	label, ok := strings.CutSuffix(name, "."+o.apps)
	if !ok {
		return Control, Host{}, nil
	}
	if strings.Contains(label, ".") {
		return AppsParent, Host{}, fmt.Errorf("host %q: apps hosts have one label under %s: %w", errdefs.Clip(name, 80), o.apps, errdefs.ErrNotFound)
	}
	h, err := ParseLabel(label)
	if err != nil {
		return AppsParent, Host{}, err
	}
	return Apps, h, nil
}

// Target checks a handoff's destination: an absolute URL on an apps host, with the scheme
// and port app hosts are served on (nothing else is a redirect target: no open redirect).
// It returns the host and the URL as it will be redirected to.
func (o *Origins) Target(raw, reqHost string) (Host, *url.URL, error) {
	bad := func(why string) (Host, *url.URL, error) {
		return Host{}, nil, fmt.Errorf("to=%q: %s: %w", errdefs.Clip(raw, 80), why, errdefs.ErrInvalidArgument)
	}
	u, err := url.Parse(raw)
	if err != nil || u.Opaque != "" || u.User != nil {
		return bad("want an absolute URL of an apps host")
	}
	if u.Scheme != o.scheme {
		return bad("want scheme " + o.scheme)
	}
	if u.Port() != o.portFor(reqHost) {
		return bad("not the port apps are served on")
	}
	where, h, err := o.Lookup(u.Host)
	if err != nil || where != Apps {
		return bad("not an apps host under " + o.apps)
	}
	u.Host = strings.ToLower(u.Host)
	u.Fragment = ""
	return h, u, nil
}

// DialLocalhost wraps a dialer so that names under localhost reach loopback, as browsers
// resolve them (RFC 6761) and Go's resolver does not: for clients of a local install's
// apps hosts (tests, benchmarks, the CLI).
func DialLocalhost(d *net.Dialer) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if host, port, err := net.SplitHostPort(addr); err == nil {
			h := strings.ToLower(strings.TrimSuffix(host, "."))
			if h == "localhost" || strings.HasSuffix(h, ".localhost") {
				addr = net.JoinHostPort("127.0.0.1", port)
			}
		}
		return d.DialContext(ctx, network, addr)
	}
}
