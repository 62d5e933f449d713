package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"
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

// CreateAPIToken creates a token for userID named name (1 to 64 printable
// characters, e.g. "laptop CLI"). The token itself is returned only here; show it once.
func (s *Service) CreateAPIToken(ctx context.Context, userID, name string) (Token, store.APIToken, error) {
	name = strings.TrimSpace(name)
	if err := checkTokenName(name); err != nil {
		return "", store.APIToken{}, err
	}
	var (
		tok  Token
		info store.APIToken
	)
	err := s.st.Update(ctx, func(tx *store.Tx) error {
		var err error
		tok, info, err = s.createAPIToken(ctx, tx, userID, name)
		return err
	})
	if err != nil {
		return "", store.APIToken{}, err
	}
	return tok, info, nil
}

// createAPIToken creates and audits a token for userID inside tx; name is checked.
func (s *Service) createAPIToken(ctx context.Context, tx *store.Tx, userID, name string) (Token, store.APIToken, error) {
	var b [32]byte
	_, _ = rand.Read(b[:])
	tok := Token(TokenPrefix + base64.RawURLEncoding.EncodeToString(b[:]))
	info, err := tx.CreateAPIToken(ctx, store.APIToken{
		UserID: userID, Name: name, TokenHash: tokenHash(tok), Prefix: string(tok[:tokenDisplayLen]), CreatedAt: s.now(),
	})
	if err != nil {
		return "", store.APIToken{}, err
	}
	err = tx.AppendAudit(ctx, s.audit(userID, "auth.token.create", info.ID, map[string]any{"name": name, "prefix": info.Prefix}))
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
// and records its use. An unknown or revoked token is [ErrUnauthenticated].
func (s *Service) AuthenticateToken(ctx context.Context, tok Token) (User, store.APIToken, error) {
	if _, err := ParseToken(string(tok)); err != nil {
		return User{}, store.APIToken{}, err
	}
	t, u, err := s.st.APITokenByHash(ctx, tokenHash(tok))
	if errors.Is(err, errdefs.ErrNotFound) {
		return User{}, store.APIToken{}, ErrUnauthenticated
	} else if err != nil {
		return User{}, store.APIToken{}, err
	}
	if !t.RevokedAt.IsZero() {
		return User{}, store.APIToken{}, ErrUnauthenticated
	}
	if now := s.now(); now.Sub(t.LastUsedAt) >= s.cfg.touchEvery { // at most one write per touchEvery, as for sessions
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
// already revoked token is [errdefs.ErrNotFound].
func (s *Service) RevokeAPIToken(ctx context.Context, userID, tokenID string) error {
	return s.st.Update(ctx, func(tx *store.Tx) error {
		if err := tx.RevokeAPIToken(ctx, userID, tokenID, s.now()); err != nil {
			return err
		}
		return tx.AppendAudit(ctx, s.audit(userID, "auth.token.revoke", tokenID, nil))
	})
}

// ListAPITokens returns userID's tokens (without secrets), newest first.
func (s *Service) ListAPITokens(ctx context.Context, userID string) ([]store.APIToken, error) {
	return s.st.ListAPITokens(ctx, userID)
}
