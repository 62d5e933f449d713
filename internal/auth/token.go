package auth

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/store"
)

// API tokens are "pdk_" followed by 32 random bytes in base64url (47 characters).
// The prefix makes a leaked token recognizable to secret scanners and to people;
// the first 12 characters are kept in the clear to tell tokens apart in a list.
const (
	TokenPrefix     = "pdk_"
	tokenDisplayLen = 12
)

var tokenLen = len(TokenPrefix) + base64.RawURLEncoding.EncodedLen(32)

// ParseToken checks that s has the form of an API token (without looking it up).
// Anything else is [ErrUnauthenticated].
func ParseToken(s string) (Token, error) {
	rest, ok := strings.CutPrefix(s, TokenPrefix)
	if !ok || len(s) != tokenLen {
		return "", fmt.Errorf("API token: not a paddock token: %w", ErrUnauthenticated)
	}
	if b, err := base64.RawURLEncoding.Strict().DecodeString(rest); err != nil || len(b) != 32 {
		return "", fmt.Errorf("API token: not a paddock token: %w", ErrUnauthenticated)
	}
	return Token(s), nil
}

// BearerToken extracts the API token from r's "Authorization: Bearer <token>"
// header. A missing header, another scheme or a malformed token is [ErrUnauthenticated].
func BearerToken(r *http.Request) (Token, error) {
	return parseBearer(r.Header.Get("Authorization"))
}

func parseBearer(h string) (Token, error) {
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", fmt.Errorf("no bearer token: %w", ErrUnauthenticated)
	}
	return ParseToken(strings.TrimSpace(tok))
}

func tokenHash(t Token) []byte {
	h := sha256.Sum256([]byte(t))
	return h[:]
}

// TokenSpec is what a new API token is to be.
type TokenSpec struct {
	// Name labels the token: 1 to 64 printable characters ("laptop CLI").
	Name string
	// Scopes are what it may do; nil means [DefaultScopes], or Parent's scopes.
	Scopes Scopes
	// TTL is how long it lasts; 0 means the default lifetime (WithTokenLifetime).
	TTL time.Duration
	// Parent is the token that asks for this one, nil for a signed-in browser. A token
	// mints only tokens no broader and no longer-lived than itself.
	Parent *store.APIToken
}

// CreateAPIToken creates a token for u. The token itself is returned only here; show it
// once. A bad name or lifetime is [errdefs.ErrInvalidArgument]; a scope u may not hold, or
// one (or an expiry) beyond Parent's, is [errdefs.ErrPermissionDenied] naming it.
func (s *Service) CreateAPIToken(ctx context.Context, u User, spec TokenSpec) (Token, store.APIToken, error) {
	spec.Name = strings.TrimSpace(spec.Name)
	if err := checkTokenName(spec.Name); err != nil {
		return "", store.APIToken{}, err
	}
	exp, err := s.tokenBounds(u, &spec)
	if errors.Is(err, errdefs.ErrPermissionDenied) {
		detail := map[string]any{"name": spec.Name, "reason": err.Error()}
		if spec.Parent != nil {
			detail["parent_id"] = spec.Parent.ID
		}
		ev := s.audit(u.ID, "auth.token.refused", u.ID, detail)
		if aerr := s.st.Update(ctx, func(tx *store.Tx) error { return tx.AppendAudit(ctx, ev) }); aerr != nil {
			return "", store.APIToken{}, aerr
		}
	}
	if err != nil {
		return "", store.APIToken{}, err
	}
	var (
		tok  Token
		info store.APIToken
	)
	err = s.st.Update(ctx, func(tx *store.Tx) error {
		var err error
		tok, info, err = s.createAPIToken(ctx, tx, u.ID, spec.Name, spec.Scopes, exp)
		return err
	})
	if err != nil {
		return "", store.APIToken{}, err
	}
	return tok, info, nil
}

// tokenBounds checks spec's scopes and lifetime against u and spec.Parent, fills in the
// defaults, and returns the new token's expiry.
func (s *Service) tokenBounds(u User, spec *TokenSpec) (time.Time, error) {
	now := s.now()
	switch {
	case spec.Scopes == nil && spec.Parent != nil:
		spec.Scopes = TokenScopes(*spec.Parent)
	case spec.Scopes == nil:
		spec.Scopes = DefaultScopes
	}
	if len(spec.Scopes) == 0 {
		return time.Time{}, fmt.Errorf("scopes: a token needs at least one (%s): %w", Scopes(AllScopes), errdefs.ErrInvalidArgument)
	}
	mine := UserScopes(u)
	for _, sc := range spec.Scopes {
		if !mine.Has(sc) {
			return time.Time{}, fmt.Errorf("scope %q: only an admin's token may hold it: %w", sc, errdefs.ErrPermissionDenied)
		}
		if spec.Parent != nil && !TokenScopes(*spec.Parent).Has(sc) {
			return time.Time{}, fmt.Errorf("scope %q: this token lacks it, and a token cannot mint one broader than itself: %w", sc, errdefs.ErrPermissionDenied)
		}
	}
	switch {
	case spec.TTL < 0:
		return time.Time{}, fmt.Errorf("expires_in: %s is negative: %w", spec.TTL, errdefs.ErrInvalidArgument)
	case spec.TTL > s.cfg.tokenMaxTTL:
		return time.Time{}, fmt.Errorf("expires_in: %s is over the longest token lifetime, %s (tokens.max_ttl): %w", spec.TTL, s.cfg.tokenMaxTTL, errdefs.ErrInvalidArgument)
	}
	exp := now.Add(cmp.Or(spec.TTL, min(s.cfg.tokenDefaultTTL, s.cfg.tokenMaxTTL)))
	if p := spec.Parent; p != nil && exp.After(p.ExpiresAt) {
		if spec.TTL != 0 {
			return time.Time{}, fmt.Errorf("expires_in: %s would outlive this token, which expires at %s; a token cannot mint one that lives longer: %w",
				spec.TTL, p.ExpiresAt.Format(time.RFC3339), errdefs.ErrPermissionDenied)
		}
		exp = p.ExpiresAt // the default lifetime is cut to the parent's
	}
	return exp, nil
}

// createAPIToken creates and audits a token for userID inside tx; name and scopes are
// checked.
func (s *Service) createAPIToken(ctx context.Context, tx *store.Tx, userID, name string, scopes Scopes, exp time.Time) (Token, store.APIToken, error) {
	var b [32]byte
	_, _ = rand.Read(b[:])
	tok := Token(TokenPrefix + base64.RawURLEncoding.EncodeToString(b[:]))
	info, err := tx.CreateAPIToken(ctx, store.APIToken{
		UserID: userID, Name: name, TokenHash: tokenHash(tok), Prefix: string(tok[:tokenDisplayLen]), CreatedAt: s.now(),
		ExpiresAt: exp, Scopes: scopes.String(),
	})
	if err != nil {
		return "", store.APIToken{}, err
	}
	err = tx.AppendAudit(ctx, s.audit(userID, "auth.token.create", info.ID, map[string]any{"name": name, "prefix": info.Prefix,
		"scopes": info.Scopes, "expires_at": exp.Format(time.RFC3339)}))
	if err != nil {
		return "", store.APIToken{}, err
	}
	return tok, info, nil
}

func checkTokenName(name string) error {
	if name == "" || len(name) > 64 {
		return fmt.Errorf("token name must be 1 to 64 characters: %w", errdefs.ErrInvalidArgument)
	}
	for _, r := range name {
		if !unicode.IsPrint(r) {
			return fmt.Errorf("token name must be printable text: %w", errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// AuthenticateToken returns the user a token belongs to and the token's record,
// and records its use. An unknown, revoked or expired token is [ErrUnauthenticated].
func (s *Service) AuthenticateToken(ctx context.Context, tok Token) (User, store.APIToken, error) {
	if _, err := ParseToken(string(tok)); err != nil {
		return User{}, store.APIToken{}, err
	}
	h := tokenHash(tok)
	now := s.now()
	e, ok := s.tokens.get(h, now)
	ok = ok && s.cacheTrusted()
	if !ok {
		gen := s.tokens.generation()
		t, u, err := s.st.APITokenByHash(ctx, h)
		if errors.Is(err, errdefs.ErrNotFound) {
			return User{}, store.APIToken{}, ErrUnauthenticated
		} else if err != nil {
			return User{}, store.APIToken{}, err
		}
		e = cachedSession{tok: t, u: u, fetched: now}
		s.tokens.put(gen, h, e)
	}
	t, u := e.tok, e.u
	if !t.RevokedAt.IsZero() {
		return User{}, store.APIToken{}, ErrUnauthenticated
	}
	if !now.Before(t.ExpiresAt) {
		return User{}, store.APIToken{}, fmt.Errorf("API token %s… expired at %s; make a new one (paddock login): %w",
			t.Prefix, t.ExpiresAt.Format(time.RFC3339), ErrUnauthenticated)
	}
	if now.Sub(t.LastUsedAt) >= s.cfg.touchEvery && !ok { // at most one write per touchEvery, as for sessions
		if err := s.st.TouchAPIToken(ctx, t.ID, now, s.cfg.touchEvery); err != nil {
			s.cfg.log.WarnContext(ctx, "recording API token use", "token_id", t.ID, "err", err)
		}
	}
	return userOf(u), t, nil
}

// TokenFromRequest authenticates r's bearer token.
func (s *Service) TokenFromRequest(ctx context.Context, r *http.Request) (User, store.APIToken, error) {
	tok, err := BearerToken(r)
	if err != nil {
		return User{}, store.APIToken{}, err
	}
	return s.AuthenticateToken(ctx, tok)
}

// RevokeAPIToken revokes userID's token tokenID. Someone else's, an unknown or an
// already revoked token is [errdefs.ErrNotFound]. Tokens are cached as sessions are: the
// revocation is numbered and notified as a sign-out is, and returns once no replica
// accepts the token any more.
func (s *Service) RevokeAPIToken(ctx context.Context, userID, tokenID string) error {
	var seq int64
	err := s.st.Update(ctx, func(tx *store.Tx) error {
		if err := tx.RevokeAPIToken(ctx, userID, tokenID, s.now()); err != nil {
			return err
		}
		var err error
		if seq, err = s.noteSessionsEnded(ctx, tx, userID); err != nil {
			return err
		}
		return tx.AppendAudit(ctx, s.audit(userID, "auth.token.revoke", tokenID, nil))
	})
	s.sessionsEnded(ctx, seq, err)
	return err
}

// ListAPITokens returns userID's tokens (without secrets), newest first.
func (s *Service) ListAPITokens(ctx context.Context, userID string) ([]store.APIToken, error) {
	return s.st.ListAPITokens(ctx, userID)
}
