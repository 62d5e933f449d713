package proxy

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"unicode"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/errdefs"
)

// credentialHeaders carry the user's credentials for the control plane; a sandbox never
// sees them.
var credentialHeaders = []string{"Authorization", "Proxy-Authorization", "X-CSRF-Token"}

// scrubRequest removes from an outbound request what the sandbox must not see or must
// not be able to trust: credentials, reserved cookies, and every header the client
// could use to pose as the proxy (X-Paddock-*, X-Forwarded-*, Forwarded, X-Real-IP).
func scrubRequest(h http.Header, reserved func(string) bool) {
	for _, k := range credentialHeaders {
		h.Del(k)
	}
	for k := range h {
		if hasPrefixFold(k, "X-Paddock-") || hasPrefixFold(k, "X-Forwarded-") ||
			strings.EqualFold(k, "Forwarded") || strings.EqualFold(k, "X-Real-Ip") {
			delete(h, k)
		}
	}
	if c := filterCookies(h.Values("Cookie"), reserved); c != "" {
		h.Set("Cookie", c)
	} else {
		h.Del("Cookie")
	}
}

// filterCookies joins the Cookie header values into one, without the pairs that name a
// reserved cookie. It splits on ';' the way servers parse the header, and keeps every
// other pair byte for byte (trimmed), valid or not: the app's cookies are the app's.
func filterCookies(values []string, reserved func(string) bool) string {
	var b strings.Builder
	for _, v := range values {
		for pair := range strings.SplitSeq(v, ";") {
			pair = strings.TrimSpace(pair)
			if pair == "" || reserved(cookieName(pair)) {
				continue
			}
			if b.Len() > 0 {
				b.WriteString("; ")
			}
			b.WriteString(pair)
		}
	}
	return b.String()
}

// cookieName is the name of a "name=value" pair, trimmed of space and quotes, which
// some parsers tolerate.
func cookieName(pair string) string {
	name, _, _ := strings.Cut(pair, "=")
	return trimCookieName(name)
}

// trimCookieName drops what a cookie parser may skip around a name: any whitespace (a
// browser's, Go's and others' differ, so all of it, CR and LF included) and quotes.
func trimCookieName(s string) string {
	return strings.TrimFunc(s, func(r rune) bool { return r == '"' || unicode.IsSpace(r) })
}

// dropReservedSetCookies removes the Set-Cookie values that would set a reserved cookie
// in any spelling and returns the names it dropped. Browsers read a first segment with
// no name ("=paddock_session=x") or no '=' as a nameless cookie and send its value back
// as if it were "name=value", so the value is checked as a name too.
func dropReservedSetCookies(h http.Header, reserved func(string) bool) []string {
	vals := h.Values("Set-Cookie")
	if len(vals) == 0 {
		return nil
	}
	var kept []string
	var dropped []string
	for _, v := range vals {
		first, _, _ := strings.Cut(v, ";")
		nameless := strings.TrimLeftFunc(first, isCookieJunk)
		if name := cookieName(first); reserved(name) || reserved(trimCookieName(first)) ||
			reserved(cookieName(nameless)) || reserved(trimCookieName(nameless)) {
			dropped = append(dropped, cookieName(nameless))
			continue
		}
		kept = append(kept, v)
	}
	h.Del("Set-Cookie")
	for _, v := range kept {
		h.Add("Set-Cookie", v)
	}
	return dropped
}

// isCookieJunk is what parsers skip or treat as no name at a cookie's start.
func isCookieJunk(r rune) bool { return r == '"' || r == '=' || unicode.IsSpace(r) }

// canonicalCookieName is the name a cookie parser could read from name: trimmed of
// whitespace, quotes and '=', in lower case, without the __Host- and __Secure- prefixes
// (a sandbox must not set those spellings either).
func canonicalCookieName(name string) string {
	n := strings.ToLower(strings.TrimFunc(name, isCookieJunk))
	for {
		rest, ok := strings.CutPrefix(n, "__host-")
		if !ok {
			rest, ok = strings.CutPrefix(n, "__secure-")
		}
		if !ok {
			return n
		}
		n = strings.TrimFunc(rest, isCookieJunk)
	}
}

func (p *Proxy) isReserved(name string) bool {
	return len(p.reserved) > 0 && p.reserved[canonicalCookieName(name)]
}

// stampRequest tells the app which role and sandbox a request was routed to.
func stampRequest(h http.Header, info *reqInfo) {
	h.Set(api.HeaderRole, info.caller.Role)
	h.Set(api.HeaderSandbox, info.target.SandboxID)
}

// stampResponse tells the client which sandbox served it, and whether its build differs.
func stampResponse(h http.Header, info *reqInfo) {
	h.Set(api.HeaderRole, info.caller.Role)
	h.Set(api.HeaderSandbox, info.target.SandboxID)
	if info.mismatch {
		h.Set(api.HeaderMismatch, "1")
	}
}

// upgradeOf returns "websocket" for a WebSocket handshake and "" for a plain request. Any
// other protocol in Upgrade is refused even without Connection: upgrade: nothing but
// WebSocket has a reason to ask, and h2c would leave the proxy's per-request checks.
func upgradeOf(h http.Header) (string, error) {
	n := 0
	for _, v := range h.Values("Upgrade") {
		for tok := range strings.SplitSeq(v, ",") {
			tok = strings.TrimSpace(tok)
			if tok == "" {
				continue
			}
			if !strings.EqualFold(tok, "websocket") {
				return "", fmt.Errorf("header Upgrade: %q is not supported; only websocket is: %w", errdefs.Clip(tok, 64), errdefs.ErrInvalidArgument)
			}
			n++
		}
	}
	if n == 0 || !headerHasToken(h, "Connection", "upgrade") {
		return "", nil
	}
	return "websocket", nil
}

// headerHasToken reports whether a comma-separated header lists token.
func headerHasToken(h http.Header, key, token string) bool {
	for _, v := range h.Values(key) {
		for tok := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(tok), token) {
				return true
			}
		}
	}
	return false
}

// headerTokens lists the comma-separated tokens of a header, such as the subprotocols
// of Sec-WebSocket-Protocol.
func headerTokens(h http.Header, key string) []string {
	var out []string
	for _, v := range h.Values(key) {
		for tok := range strings.SplitSeq(v, ",") {
			if tok = strings.TrimSpace(tok); tok != "" {
				out = append(out, tok)
			}
		}
	}
	return out
}

// checkOrigin refuses a browser's WebSocket handshake from another site (cross-site
// WebSocket hijacking: the browser would attach the user's cookies). Allowed are no
// Origin (not a browser), the request's own scheme://host, https on its own host (a
// TLS proxy in front), and the trusted origins.
func (p *Proxy) checkOrigin(r *http.Request) error {
	o := r.Header.Get("Origin")
	if o == "" {
		return nil
	}
	norm, err := normalizeOrigin(o)
	if err == nil {
		scheme := "http"
		if r.TLS != nil {
			scheme = "https"
		}
		host := lower(r.Host)
		if norm == scheme+"://"+host || norm == "https://"+host || p.trusted[norm] {
			return nil
		}
	}
	return fmt.Errorf("a WebSocket from origin %q is not allowed here: %w", errdefs.Clip(o, 64), errdefs.ErrPermissionDenied)
}

// normalizeOrigin lower-cases scheme://host[:port] and refuses anything else ("null",
// paths, user info).
func normalizeOrigin(o string) (string, error) {
	u, err := url.Parse(o)
	if err != nil || u.Scheme == "" || u.Host == "" || u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("origin %q: want scheme://host[:port]: %w", errdefs.Clip(o, 64), errdefs.ErrInvalidArgument)
	}
	return lower(u.Scheme) + "://" + lower(u.Host), nil
}

func parseTrustedOrigins(origins []string) (map[string]bool, error) {
	m := map[string]bool{}
	for _, o := range origins {
		n, err := normalizeOrigin(o)
		if err != nil {
			return nil, fmt.Errorf("proxy: TrustedOrigins: %w", err)
		}
		m[n] = true
	}
	return m, nil
}

// clientBuild is the runtime build a client says its code came from.
func clientBuild(r *http.Request) string {
	if b := r.Header.Get(api.HeaderClientBuild); b != "" {
		return errdefs.Clip(b, 64)
	}
	if q := r.URL.RawQuery; !strings.Contains(q, api.QueryClientBuild) && !strings.Contains(q, "%") {
		return "" // most requests: no query to parse (the name may come percent-encoded)
	}
	return errdefs.Clip(r.URL.Query().Get(api.QueryClientBuild), 64)
}

// validSandboxID accepts IDs that are safe as a URL host and a pool key.
func validSandboxID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for _, c := range []byte(id) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

func lower(s string) string { return strings.ToLower(s) }

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}
