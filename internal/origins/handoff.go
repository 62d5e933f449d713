package origins

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/paddockhq/paddock/internal/auth"
	"github.com/paddockhq/paddock/internal/errdefs"
)

// App-host cookie names. Over TLS (secure_cookies) only the __Host- one counts: Secure,
// Path=/, no Domain, so no other host and no plain-http page can set it.
const (
	CookieName         = "paddock_app"
	SecureCookieName   = "__Host-paddock_app"
	HandoffParam       = "paddock_handoff"
	CodeTTL            = 60 * time.Second
	maxCodesPerUser    = 64
	maxCookiesPerUser  = 256
	secretBytes        = 32
	handoffPath        = "/auth/handoff"
	handoffTargetParam = "to"
)

// HandoffPath is the control plane's handoff endpoint; its query parameter "to" is the
// apps-host URL to return to.
func HandoffPath(to string) string {
	return handoffPath + "?" + handoffTargetParam + "=" + url.QueryEscape(to)
}

// Grant is what a handoff code or an app cookie stands for.
type Grant struct {
	// Host is the lower-case host[:port] it is valid on, and nowhere else.
	Host   string
	UserID string
	// Session is the control-plane session it came from: when that ends, so does the grant.
	Session auth.SessionID
	// Expires bounds the grant (a code's 60 s; a cookie's session's absolute expiry).
	Expires time.Time
}

// Handoffs holds outstanding handoff codes and the app cookies they were exchanged for,
// in memory: a restart of the control plane signs browsers out of app hosts, and the next
// navigation hands them off again. Safe for concurrent use.
type Handoffs struct {
	mu      sync.Mutex
	codes   map[string]Grant
	cookies map[string]Grant
	now     func() time.Time
}

// NewHandoffs returns an empty store; now is the clock (nil: time.Now).
func NewHandoffs(now func() time.Time) *Handoffs {
	if now == nil {
		now = time.Now
	}
	return &Handoffs{codes: map[string]Grant{}, cookies: map[string]Grant{}, now: now}
}

func newSecret() string {
	b := make([]byte, secretBytes)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// Mint returns a single-use code for g, valid for CodeTTL. A user may hold a bounded
// number of unused codes.
func (h *Handoffs) Mint(g Grant) (string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.now()
	n := 0
	for c, x := range h.codes {
		if !now.Before(x.Expires) {
			delete(h.codes, c)
		} else if x.UserID == g.UserID {
			n++
		}
	}
	if n >= maxCodesPerUser {
		return "", fmt.Errorf("%d handoffs within %s: wait a minute: %w", n, CodeTTL, errdefs.ErrLimitExceeded)
	}
	g.Host = strings.ToLower(g.Host)
	g.Expires = now.Add(CodeTTL)
	code := newSecret()
	h.codes[code] = g
	return code, nil
}

// Redeem uses code up, whatever the outcome, and returns its grant when it is unexpired
// and was minted for host.
func (h *Handoffs) Redeem(code, host string) (Grant, error) {
	h.mu.Lock()
	g, ok := h.codes[code]
	delete(h.codes, code)
	h.mu.Unlock()
	switch {
	case !ok:
		return Grant{}, fmt.Errorf("this sign-in link was used already or never issued: %w", errdefs.ErrPermissionDenied)
	case !h.now().Before(g.Expires):
		return Grant{}, fmt.Errorf("this sign-in link expired (links last %s): %w", CodeTTL, errdefs.ErrPermissionDenied)
	case subtle.ConstantTimeCompare([]byte(g.Host), []byte(strings.ToLower(host))) != 1:
		return Grant{}, fmt.Errorf("this sign-in link was made for another host: %w", errdefs.ErrPermissionDenied)
	}
	return g, nil
}

// Open makes a cookie value standing for g (its Expires set by the caller).
func (h *Handoffs) Open(g Grant) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.now()
	var oldest string
	n := 0
	for v, x := range h.cookies {
		switch {
		case !now.Before(x.Expires):
			delete(h.cookies, v)
		case x.UserID == g.UserID:
			n++
			if oldest == "" || x.Expires.Before(h.cookies[oldest].Expires) {
				oldest = v
			}
		}
	}
	if n >= maxCookiesPerUser {
		delete(h.cookies, oldest)
	}
	g.Host = strings.ToLower(g.Host)
	v := newSecret()
	h.cookies[v] = g
	return v
}

// Cookie returns the grant of the first of values that is unexpired and was opened for
// host. A cookie opened for another host is refused: a page can toss cookies onto its
// sibling hosts, never make one valid there.
func (h *Handoffs) Cookie(values []string, host string) (Grant, string, bool) {
	host = strings.ToLower(host)
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.now()
	for _, v := range values {
		g, ok := h.cookies[v]
		if ok && now.Before(g.Expires) && subtle.ConstantTimeCompare([]byte(g.Host), []byte(host)) == 1 {
			return g, v, true
		}
	}
	return Grant{}, "", false
}

// Revoke ends one cookie.
func (h *Handoffs) Revoke(value string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.cookies, value)
}

// Values lists the values of every cookie of r named name (a request may carry several:
// its own host's and ones tossed from a sibling host).
func Values(r *http.Request, name string) []string {
	var out []string
	for _, c := range r.CookiesNamed(name) {
		out = append(out, c.Value)
	}
	return out
}
