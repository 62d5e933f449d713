package egress

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
)

// CapabilityVerifier verifies a capability token for one connection: that it allows the
// connect action on resource (net:HOST, net:[IPv6]) for the sandbox the connection came
// from. It returns the token's ID for the audit trail, or an error whose message says why
// not and never holds the token itself.
type CapabilityVerifier interface {
	VerifyConnect(ctx context.Context, sandbox, token, resource string) (id string, err error)
}

// proxyAuthRealm is what a 407 asks for.
const proxyAuthRealm = `Basic realm="paddock egress: a net: capability token as the user name"`

// checkCapability applies the capability the request carries, if any, to host: a token
// that does not allow host refuses the request (a token only narrows what the policy
// allows), and a decision that requires one (policy.Decision.RequireCapability) refuses a
// request without. A request's token is
// its Proxy-Authorization: "Bearer TOKEN", or Basic with the token as the user name,
// which is what a client sends for HTTPS_PROXY=http://TOKEN@127.0.0.1:3128.
func (p *Proxy) checkCapability(ctx context.Context, x *exchange, host string) *refusal {
	token, err := proxyToken(x.req.header.Values("Proxy-Authorization"))
	if err != nil {
		return deny("egress.capability", http.StatusForbidden, "http_request_denied", "%s", err.Error())
	}
	if token == "" {
		if x.ev.Decision.RequireCapability {
			return &refusal{status: http.StatusProxyAuthRequired, stage: StageDenied, rule: "egress.capability",
				reason: "this sandbox's network policy requires a net: capability token for every connection; give it as the proxy's user name " +
					"(HTTPS_PROXY=http://TOKEN@127.0.0.1:3128) or as Proxy-Authorization: Bearer TOKEN",
				proxyStatus: "http_request_denied", authenticate: proxyAuthRealm}
		}
		return nil
	}
	if p.caps == nil {
		return deny("egress.capability", http.StatusForbidden, "http_request_denied", "this proxy takes no capability tokens")
	}
	id, err := p.caps.VerifyConnect(ctx, x.ev.Sandbox, token, netResource(host))
	if err != nil {
		return deny("egress.capability", http.StatusForbidden, "http_request_denied", "%s", errText(err))
	}
	x.ev.Capability = id
	return nil
}

// netResource is host as a net: resource names it: IPv6 addresses in brackets.
func netResource(host string) string {
	if a, err := netip.ParseAddr(host); err == nil && a.Is6() {
		return "net:[" + host + "]"
	}
	return "net:" + host
}

// capabilityPrefix starts every capability token's wire form (capability.Token.Encoded;
// TestCapabilityPrefix holds the two together).
const capabilityPrefix = "pdk1."

// proxyToken is the capability token in a request's Proxy-Authorization values, "" when
// none carries one. Credentials that are not a capability token (a user and password a
// program put in its proxy URL) are not the proxy's business: they are ignored, as before
// tokens, and never passed on (Proxy-Authorization is removed before anything goes
// upstream). A token is judged by the verifier, which says what is wrong with a bad one.
func proxyToken(values []string) (string, error) {
	var found []string
	for _, v := range values {
		if t := credentialToken(v); t != "" {
			found = append(found, t)
		}
	}
	if len(found) > 1 {
		return "", fmt.Errorf("the request carries %d capability tokens in its Proxy-Authorization headers; send one", len(found))
	}
	if len(found) == 0 {
		return "", nil
	}
	return found[0], nil
}

// credentialToken is the capability token in one Proxy-Authorization value: "Bearer
// TOKEN", or Basic credentials whose user name (or password) is the token.
func credentialToken(v string) string {
	scheme, cred, _ := strings.Cut(strings.TrimSpace(v), " ")
	cred = strings.TrimSpace(cred)
	switch strings.ToLower(scheme) {
	case "bearer":
		return asToken(cred)
	case "basic":
		raw, err := base64.StdEncoding.DecodeString(cred)
		if err != nil {
			return ""
		}
		user, pass, _ := strings.Cut(string(raw), ":")
		if t := asToken(user); t != "" {
			return t
		}
		return asToken(pass)
	}
	return ""
}

func asToken(s string) string {
	if strings.HasPrefix(s, capabilityPrefix) {
		return s
	}
	return ""
}
