package origins

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/paddockhq/paddock/internal/auth"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/store"
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

// Handoffs holds outstanding handoff codes (in memory) and the app cookies they were
// exchanged for, by the SHA-256 of their values (in memory, and in a file once Persist
// is called, so that a restart of the control plane keeps browsers signed in on app and
// desktop hosts while their sessions last). Safe for concurrent use.
type Handoffs struct {
	mu      sync.Mutex
	codes   map[string]Grant
	cookies map[string]cookieEntry
	now     func() time.Time
	path    string
	// shared, when set, keeps codes and cookies in the database instead (see Share);
	// seen holds the shared cookies read lately, by key (see sharedCookieTTL).
	shared *store.Store
	seen   map[string]seenCookie
}

// seenCookie is a shared cookie's grant as read from the database at read.
type seenCookie struct {
	grant Grant
	read  time.Time
}

// sharedCookieTTL is how long a replica answers a shared cookie from what it read,
// without the database. A cookie's row never changes; it goes when its session ends,
// which every request checks in the database, when it expires, which the grant says, or
// when it is its user's oldest beyond maxCookiesPerUser, which another replica may then
// go on taking for this long (while its session lasts).
const sharedCookieTTL = time.Minute

// maxSeenCookies bounds seen; past it, it starts again empty.
const maxSeenCookies = 4096

// Share keeps every code and cookie in st, where every replica sharing the database finds
// them, instead of in memory and the Persist file.
func (h *Handoffs) Share(st *store.Store) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.shared = st
}

// sharedTimeout bounds each of the shared store's steps.
const sharedTimeout = 10 * time.Second

func (h *Handoffs) sharedStore() *store.Store {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.shared
}

// cookieEntry is one app cookie's grant and its session sealed with the cookie's value:
// what the Persist file keeps, which opens nothing without the cookie itself. A grant
// read back from the file has no Session until its cookie is next presented.
type cookieEntry struct {
	Host    string    `json:"host"`
	UserID  string    `json:"user"`
	Expires time.Time `json:"expires"`
	Sealed  []byte    `json:"sealed"`
	session auth.SessionID
}

func (e cookieEntry) grant() Grant {
	return Grant{Host: e.Host, UserID: e.UserID, Session: e.session, Expires: e.Expires}
}

// sealer is AES-256-GCM under a key derived from a cookie's value.
func sealer(value string) cipher.AEAD {
	key := sha256.Sum256([]byte("paddock app cookie seal\x00" + value))
	b, _ := aes.NewCipher(key[:])
	a, _ := cipher.NewGCM(b)
	return a
}

func seal(value string, id auth.SessionID) []byte {
	a := sealer(value)
	nonce := make([]byte, a.NonceSize())
	_, _ = rand.Read(nonce)
	return a.Seal(nonce, nonce, []byte(id.Reveal()), nil)
}

func unseal(value string, sealed []byte) (auth.SessionID, bool) {
	a := sealer(value)
	if len(sealed) < a.NonceSize() {
		return "", false
	}
	b, err := a.Open(nil, sealed[:a.NonceSize()], sealed[a.NonceSize():], nil)
	if err != nil {
		return "", false
	}
	return auth.SessionID(b), true
}

// cookieKey is how a cookie value is kept: its SHA-256, so that the file holds no
// credential.
func cookieKey(value string) string {
	sum := sha256.Sum256([]byte(value))
	return hex.EncodeToString(sum[:])
}

// Persist loads the cookies kept in path (none when it does not exist) and keeps every
// later change there.
func (h *Handoffs) Persist(path string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return fmt.Errorf("reading the app-host sign-ins: %w", err)
	default:
		var kept map[string]cookieEntry
		if err := json.Unmarshal(b, &kept); err != nil {
			return fmt.Errorf("reading the app-host sign-ins %s: %w", path, err)
		}
		now := h.now()
		for k, g := range kept {
			if now.Before(g.Expires) {
				h.cookies[k] = g
			}
		}
	}
	h.path = path
	return h.saveLocked()
}

// saveLocked writes the cookies to the Persist file, whole (write and rename).
func (h *Handoffs) saveLocked() error {
	if h.path == "" {
		return nil
	}
	b, err := json.Marshal(h.cookies)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(h.path), ".handoffs-*")
	if err != nil {
		return fmt.Errorf("saving the app-host sign-ins: %w", err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(b)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), h.path)
	}
	if err != nil {
		return fmt.Errorf("saving the app-host sign-ins: %w", err)
	}
	return nil
}

// NewHandoffs returns an empty store; now is the clock (nil: time.Now).
func NewHandoffs(now func() time.Time) *Handoffs {
	if now == nil {
		now = time.Now
	}
	return &Handoffs{codes: map[string]Grant{}, cookies: map[string]cookieEntry{}, now: now}
}

func newSecret() string {
	b := make([]byte, secretBytes)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// Mint returns a single-use code for g, valid for CodeTTL. A user may hold a bounded
// number of unused codes.
func (h *Handoffs) Mint(g Grant) (string, error) {
	if st := h.sharedStore(); st != nil {
		ctx, cancel := context.WithTimeout(context.Background(), sharedTimeout)
		defer cancel()
		code := newSecret()
		now := h.now()
		err := st.PutHandoff(ctx, false, cookieKey(code), store.Handoff{UserID: g.UserID, Host: strings.ToLower(g.Host),
			Sealed: seal(code, g.Session), Expires: now.Add(CodeTTL)}, maxCodesPerUser, now)
		if err != nil {
			return "", fmt.Errorf("handoff: %w", err)
		}
		return code, nil
	}
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
	var (
		g  Grant
		ok bool
	)
	if st := h.sharedStore(); st != nil {
		ctx, cancel := context.WithTimeout(context.Background(), sharedTimeout)
		defer cancel()
		kept, err := st.TakeHandoffCode(ctx, cookieKey(code))
		if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			return Grant{}, fmt.Errorf("handoff: %w", err)
		}
		if err == nil {
			g = Grant{Host: kept.Host, UserID: kept.UserID, Expires: kept.Expires}
			g.Session, ok = unseal(code, kept.Sealed)
		}
	} else {
		h.mu.Lock()
		g, ok = h.codes[code]
		delete(h.codes, code)
		h.mu.Unlock()
	}
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
	if st := h.sharedStore(); st != nil {
		ctx, cancel := context.WithTimeout(context.Background(), sharedTimeout)
		defer cancel()
		v := newSecret()
		err := st.PutHandoff(ctx, true, cookieKey(v), store.Handoff{UserID: g.UserID, Host: strings.ToLower(g.Host),
			Sealed: seal(v, g.Session), Expires: g.Expires}, maxCookiesPerUser, h.now())
		if err != nil {
			// The browser gets a cookie that signs it in nowhere, and a handoff again.
			slog.Warn("app cookie not kept", "err", err)
		}
		return v
	}
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
	h.cookies[cookieKey(v)] = cookieEntry{Host: g.Host, UserID: g.UserID, Expires: g.Expires, Sealed: seal(v, g.Session), session: g.Session}
	// A failed save costs a sign-in after a restart, not this one.
	_ = h.saveLocked()
	return v
}

// Cookie returns the grant of the first of values that is unexpired and was opened for
// host. A cookie opened for another host is refused: a page can toss cookies onto its
// sibling hosts, never make one valid there.
func (h *Handoffs) Cookie(values []string, host string) (Grant, string, bool) {
	host = strings.ToLower(host)
	if st := h.sharedStore(); st != nil {
		for _, v := range values {
			g, ok := h.sharedCookie(st, v)
			if ok && h.now().Before(g.Expires) && subtle.ConstantTimeCompare([]byte(g.Host), []byte(host)) == 1 {
				return g, v, true
			}
		}
		return Grant{}, "", false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.now()
	for _, v := range values {
		k := cookieKey(v)
		e, ok := h.cookies[k]
		if !ok || !now.Before(e.Expires) || subtle.ConstantTimeCompare([]byte(e.Host), []byte(host)) != 1 {
			continue
		}
		if e.session == "" {
			id, ok := unseal(v, e.Sealed)
			if !ok {
				continue
			}
			e.session = id
			h.cookies[k] = e
		}
		return e.grant(), v, true
	}
	return Grant{}, "", false
}

// sharedCookie is the grant of cookie value v from the database, or as read there within
// sharedCookieTTL (then without a context or a timer: it is on every proxied request).
func (h *Handoffs) sharedCookie(st *store.Store, v string) (Grant, bool) {
	k := cookieKey(v)
	now := h.now()
	h.mu.Lock()
	c, ok := h.seen[k]
	h.mu.Unlock()
	if ok && now.Sub(c.read) < sharedCookieTTL {
		return c.grant, true
	}
	ctx, cancel := context.WithTimeout(context.Background(), sharedTimeout)
	defer cancel()
	e, err := st.AppCookie(ctx, k)
	if err != nil {
		return Grant{}, false
	}
	id, ok := unseal(v, e.Sealed)
	if !ok {
		return Grant{}, false
	}
	g := Grant{Host: e.Host, UserID: e.UserID, Session: id, Expires: e.Expires}
	h.mu.Lock()
	if h.seen == nil || len(h.seen) >= maxSeenCookies {
		h.seen = map[string]seenCookie{}
	}
	h.seen[k] = seenCookie{grant: g, read: now}
	h.mu.Unlock()
	return g, true
}

// Revoke ends one cookie.
func (h *Handoffs) Revoke(value string) {
	if st := h.sharedStore(); st != nil {
		h.mu.Lock()
		delete(h.seen, cookieKey(value))
		h.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), sharedTimeout)
		defer cancel()
		_ = st.DeleteAppCookie(ctx, cookieKey(value))
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.cookies, cookieKey(value))
	_ = h.saveLocked()
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
