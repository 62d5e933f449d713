package gateway

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// credentialWords mark a header as a credential when its lower-cased name contains one:
// Authorization, Proxy-Authorization, X-Api-Key, Api-Key, Cookie, X-Auth-Token,
// X-Goog-Api-Key, X-Session-Token, … The rule is by substring rather than a list so that
// a credential header nobody listed yet is dropped too; a header that merely looks like
// one is a small price (see notCredentials).
var credentialWords = []string{"auth", "key", "token", "secret", "cookie", "session", "passw", "credential"}

// notCredentials are headers the rule above would drop that carry no credential and that
// the providers' SDKs send.
var notCredentials = map[string]bool{"idempotency-key": true}

// hopByHop headers (RFC 9110 §7.6.1) describe one connection, not the message; they are
// dropped both ways, with any header a Connection header names.
var hopByHop = map[string]bool{
	"connection": true, "proxy-connection": true, "keep-alive": true, "te": true,
	"trailer": true, "transfer-encoding": true, "upgrade": true,
}

// requestDropped are dropped from every request besides credentials and hop-by-hop
// headers: headers that would speak for the gateway or for the sandbox's network position
// (forwarding, Via), the framing the gateway sets itself, and the OpenAI headers that
// choose which of the platform's organizations and projects pays: that is the operator's
// choice, made with the key. Accept-Encoding is dropped so that the transport negotiates
// compression itself and the gateway reads the answers it meters as plain bytes.
var requestDropped = map[string]bool{
	"expect": true, "forwarded": true, "x-real-ip": true, "via": true, "host": true,
	"content-length": true, "accept-encoding": true, "openai-organization": true, "openai-project": true,
}

// isCredentialHeader reports whether a request header may carry a credential. This is
// the whole rule for what a sandbox may not send upstream: any header whose name contains
// auth, key, token, secret, cookie, session, passw or credential, except Idempotency-Key.
func isCredentialHeader(name string) bool {
	n := strings.ToLower(name)
	if notCredentials[n] {
		return false
	}
	for _, w := range credentialWords {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}

// outboundHeader is what goes upstream: the client's headers without credentials,
// hop-by-hop and forwarding headers, plus the platform key in the provider's way.
func outboundHeader(in http.Header, p *provider) http.Header {
	out := make(http.Header, len(in)+2)
	conn := connectionTokens(in)
	for k, v := range in {
		n := strings.ToLower(k)
		if hopByHop[n] || requestDropped[n] || conn[n] || isCredentialHeader(n) ||
			strings.HasPrefix(n, "x-forwarded-") || strings.HasPrefix(n, "x-paddock-") {
			continue
		}
		out[k] = v
	}
	switch p.kind {
	case KindAnthropic:
		out.Set("X-Api-Key", p.key.Reveal())
		if out.Get("Anthropic-Version") == "" {
			out.Set("Anthropic-Version", DefaultAnthropicVersion)
		}
	default:
		out.Set("Authorization", "Bearer "+p.key.Reveal())
	}
	return out
}

// connectionTokens are the header names a Connection header lists, which are hop-by-hop
// too.
func connectionTokens(h http.Header) map[string]bool {
	var m map[string]bool
	for _, v := range h.Values("Connection") {
		for tok := range strings.SplitSeq(v, ",") {
			if tok = strings.ToLower(strings.TrimSpace(tok)); tok != "" {
				if m == nil {
					m = map[string]bool{}
				}
				m[tok] = true
			}
		}
	}
	return m
}

// copyResponseHeader passes the provider's response headers to the client, without
// hop-by-hop headers and cookies (a provider's cookies are for the platform's session, not
// the sandbox's), and without any value that holds the key, which no provider should echo
// but the sandbox must not see if one did. It returns the names it dropped for holding the
// key.
func copyResponseHeader(dst, src http.Header, key Secret) (leaked []string) {
	conn := connectionTokens(src)
	for k, v := range src {
		n := strings.ToLower(k)
		if hopByHop[n] || conn[n] || n == "set-cookie" || n == "set-cookie2" {
			continue
		}
		if holdsKey(v, key) {
			leaked = append(leaked, k)
			continue
		}
		dst[k] = v
	}
	return leaked
}

func holdsKey(vals []string, key Secret) bool {
	for _, v := range vals {
		if key != "" && strings.Contains(v, key.Reveal()) {
			return true
		}
	}
	return false
}

// credentialParams are query parameters that carry a key in some APIs (Google's ?key=,
// Azure's ?api-key=); the sandbox's are dropped like its credential headers. The match is
// exact, not by substring as for headers: list endpoints take parameters such as
// page_token that are not credentials.
var credentialParams = map[string]bool{
	"key": true, "api_key": true, "api-key": true, "apikey": true, "access_token": true,
	"token": true, "auth": true, "authorization": true, "x-api-key": true,
}

// filterQuery returns raw without credential parameters; raw itself, byte for byte, when
// it has none.
func filterQuery(raw string) string {
	if raw == "" {
		return ""
	}
	q, err := url.ParseQuery(raw)
	drop := false
	for k := range q {
		if credentialParams[strings.ToLower(k)] {
			drop = true
			delete(q, k)
		}
	}
	if err != nil {
		// Unparsable pairs are dropped by ParseQuery; forward only what it understood.
		return q.Encode()
	}
	if !drop {
		return raw
	}
	return q.Encode()
}

// upstreamPath joins the base URL's path and the rest of the client's path, both escaped.
// A segment that is "." or "..", or that unescapes to one holding '/' or '\', is refused:
// the upstream would resolve it and the request would leave the base path, which may be a
// prefix the operator chose to confine the key to (Azure deployments, a tenant's route on
// a shared proxy).
func upstreamPath(base *url.URL, rest string) (path, rawPath string, err error) {
	for seg := range strings.SplitSeq(rest, "/") {
		u, uerr := url.PathUnescape(seg)
		if uerr != nil {
			return "", "", fmt.Errorf("the path has a malformed escape in %q: %w", errdefs.Clip(seg, 64), errdefs.ErrInvalidArgument)
		}
		if u == "." || u == ".." || strings.ContainsAny(u, "/\\") {
			return "", "", fmt.Errorf("the path segment %q is not allowed (no dot segments or encoded slashes): %w", errdefs.Clip(seg, 64), errdefs.ErrInvalidArgument)
		}
	}
	rawPath = base.EscapedPath() + rest
	path, err = url.PathUnescape(rawPath)
	if err != nil {
		return "", "", fmt.Errorf("the path has a malformed escape: %w", errdefs.ErrInvalidArgument)
	}
	return path, rawPath, nil
}
