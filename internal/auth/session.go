package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/store"
)

// Session cookie names. Browsers accept a __Host- cookie only when it is Secure,
// has Path=/ and no Domain, and then no sibling subdomain or plain-http page can
// set or shadow it. A Secure cookie is never sent over plain http, so on plain-http
// (loopback) the cookie goes without the prefix and without Secure.
const (
	CookieName         = "__Host-paddock_session"
	InsecureCookieName = "paddock_session"
)

// sessionIDLen is the length of an encoded session ID: 32 random bytes, base64url.
var sessionIDLen = base64.RawURLEncoding.EncodedLen(32)

// Session is a signed-in browser session.
type Session struct {
	// ID is the secret cookie value. Only its SHA-256 is stored.
	ID         SessionID
	User       User
	CreatedAt  time.Time
	ExpiresAt  time.Time // absolute expiry
	LastSeenAt time.Time
}

// LogValue logs a session by its user and expiry, never its ID.
func (s *Session) LogValue() slog.Value {
	return slog.GroupValue(slog.Any("user", s.User), slog.Time("expires_at", s.ExpiresAt))
}

// newSessionID returns a fresh random session ID.
func newSessionID() SessionID {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return SessionID(base64.RawURLEncoding.EncodeToString(b[:]))
}

// ParseSessionID checks that s has the form of a session ID (without looking it
// up): 43 characters of base64url encoding 32 bytes.
func ParseSessionID(s string) (SessionID, error) {
	if len(s) != sessionIDLen {
		return "", fmt.Errorf("session ID: wrong length: %w", ErrUnauthenticated)
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(s)
	if err != nil || len(b) != 32 {
		return "", fmt.Errorf("session ID: not base64url: %w", ErrUnauthenticated)
	}
	return SessionID(s), nil
}

func sessionHash(id SessionID) []byte {
	h := sha256.Sum256([]byte(id))
	return h[:]
}

// newSession creates a session for u inside tx. Every login makes a new ID, so an
// ID planted before login (session fixation) is never promoted.
func (s *Service) newSession(ctx context.Context, tx *store.Tx, u store.User, c Client) (*Session, error) {
	now := s.now()
	sess := &Session{ID: newSessionID(), User: userOf(u), CreatedAt: now, ExpiresAt: now.Add(s.cfg.absoluteTTL), LastSeenAt: now}
	err := tx.CreateSession(ctx, store.Session{
		IDHash: sessionHash(sess.ID), UserID: u.ID, CreatedAt: now, ExpiresAt: sess.ExpiresAt, LastSeenAt: now,
		UserAgent: c.UserAgent, IP: c.Addr.String(),
	})
	if err != nil {
		return nil, err
	}
	return sess, nil
}

// Session looks up a session by its ID and records activity on it. A missing,
// malformed, unknown, idle or expired session is [ErrUnauthenticated].
func (s *Service) Session(ctx context.Context, id SessionID) (*Session, error) {
	if _, err := ParseSessionID(string(id)); err != nil {
		return nil, err
	}
	h := sessionHash(id)
	now := s.now()
	e, ok := s.sessions.get(h, now)
	ok = ok && s.cacheTrusted()
	if !ok {
		gen := s.sessions.generation()
		ss, u, err := s.st.SessionByHash(ctx, h)
		if errors.Is(err, errdefs.ErrNotFound) {
			return nil, ErrUnauthenticated
		} else if err != nil {
			return nil, err
		}
		e = cachedSession{ss: ss, u: u, fetched: now}
		s.sessions.put(gen, h, e)
	}
	ss, u := e.ss, e.u
	if !now.Before(ss.ExpiresAt) || !now.Before(ss.LastSeenAt.Add(s.cfg.idleTimeout)) {
		return nil, ErrUnauthenticated
	}
	// Activity is recorded at most once per touchEvery: a write per request would queue
	// every request behind the store's one writer.
	if now.Sub(ss.LastSeenAt) >= s.cfg.touchEvery && !ok {
		if err := s.st.TouchSession(ctx, h, now, s.cfg.touchEvery); err != nil {
			// The session is valid; a missed last-seen update only shortens its idle life.
			s.cfg.log.WarnContext(ctx, "recording session activity", "err", err)
		}
	}
	return &Session{ID: id, User: userOf(u), CreatedAt: ss.CreatedAt, ExpiresAt: ss.ExpiresAt, LastSeenAt: ss.LastSeenAt}, nil
}

// SessionFromRequest returns the session named by r's session cookie. Over TLS (or
// with [WithSecureCookies]) only the __Host- cookie counts, so a cookie planted
// over plain http cannot stand in for it.
func (s *Service) SessionFromRequest(ctx context.Context, r *http.Request) (*Session, error) {
	c, err := r.Cookie(s.cookieName(r))
	if err != nil {
		return nil, ErrUnauthenticated
	}
	return s.Session(ctx, SessionID(c.Value))
}

// Logout revokes sess.
func (s *Service) Logout(ctx context.Context, sess *Session) error {
	var seq int64
	err := s.st.Update(ctx, func(tx *store.Tx) error {
		if err := tx.DeleteSession(ctx, sessionHash(sess.ID)); err != nil {
			return err
		}
		var err error
		if seq, err = s.noteSessionsEnded(ctx, tx, sess.User.ID); err != nil {
			return err
		}
		return tx.AppendAudit(ctx, s.audit(sess.User.ID, "auth.logout", sess.User.ID, nil))
	})
	s.sessionsEnded(ctx, seq, err)
	if errors.Is(err, errdefs.ErrNotFound) {
		return ErrUnauthenticated
	}
	return err
}

// secure reports whether r's cookies should be Secure and __Host- prefixed.
func (s *Service) secure(r *http.Request) bool { return s.cfg.forceSecure || r.TLS != nil }

// SecureCookies reports whether cookies set in answer to r are Secure and __Host-
// prefixed (r came over TLS, or [WithSecureCookies]), so that the edge's other
// cookies follow the session cookie's rules.
func (s *Service) SecureCookies(r *http.Request) bool { return s.secure(r) }

func (s *Service) cookieName(r *http.Request) string {
	if s.secure(r) {
		return CookieName
	}
	return InsecureCookieName
}

// SessionCookie returns the cookie that carries sess in answer to r: HttpOnly,
// SameSite=Lax, Path=/, no Domain, lasting until the session's absolute expiry;
// Secure and __Host- prefixed when r came over TLS.
func (s *Service) SessionCookie(r *http.Request, sess *Session) *http.Cookie {
	return &http.Cookie{
		Name:     s.cookieName(r),
		Value:    string(sess.ID),
		Path:     "/",
		Expires:  sess.ExpiresAt,
		MaxAge:   max(1, int(sess.ExpiresAt.Sub(s.now()).Seconds())),
		Secure:   s.secure(r),
		HttpOnly: true,
		SameSite: http.SameSiteLaxMode,
	}
}

// ClearSessionCookie returns a cookie that deletes the session cookie.
func (s *Service) ClearSessionCookie(r *http.Request) *http.Cookie {
	return &http.Cookie{
		Name: s.cookieName(r), Value: "", Path: "/", MaxAge: -1,
		Secure: s.secure(r), HttpOnly: true, SameSite: http.SameSiteLaxMode,
	}
}
