package api

import (
	"fmt"
	"slices"
	"strings"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// Scope is one thing an API token may do. A route needs exactly one scope; a session
// (a signed-in browser) has every scope its user may have.
type Scope string

// The scopes, from the narrowest up. They are independent: write does not imply read.
const (
	// ScopeRead reads: every GET of the API except those below.
	ScopeRead Scope = "read"
	// ScopeWrite changes things and runs commands: every POST, PUT and DELETE of the API
	// except those below, the exec WebSocket, and the user's sandbox app.
	ScopeWrite Scope = "write"
	// ScopeTokens lists, mints and revokes the user's API tokens.
	ScopeTokens Scope = "tokens"
	// ScopeAdmin is what only an admin's token can hold: invites, every user's
	// sandboxes and events, and /metrics.
	ScopeAdmin Scope = "admin"
)

// AllScopes lists the scopes in their canonical order.
var AllScopes = []Scope{ScopeRead, ScopeWrite, ScopeTokens, ScopeAdmin}

// DefaultScopes are a new token's scopes when its request names none.
var DefaultScopes = Scopes{ScopeRead, ScopeWrite}

// Scopes is a set of scopes in canonical order.
type Scopes []Scope

// maxScopesText bounds what ParseScopes reads.
const maxScopesText = 256

// ParseScopes reads scopes separated by spaces or commas ("read write"). An unknown
// scope is [errdefs.ErrInvalidArgument] naming it; repeats are allowed and dropped.
func ParseScopes(s string) (Scopes, error) {
	if len(s) > maxScopesText {
		return nil, fmt.Errorf("scopes: over %d characters: %w", maxScopesText, errdefs.ErrInvalidArgument)
	}
	words := strings.FieldsFunc(s, func(r rune) bool { return r == ' ' || r == ',' })
	return ScopesOf(words)
}

// ScopesOf checks a list of scope names, as a JSON request carries them.
func ScopesOf(names []string) (Scopes, error) {
	if len(names) > 4*len(AllScopes) {
		return nil, fmt.Errorf("scopes: %d given; there are only %d: %w", len(names), len(AllScopes), errdefs.ErrInvalidArgument)
	}
	var out Scopes
	for _, n := range names {
		sc := Scope(n)
		if !slices.Contains(AllScopes, sc) {
			return nil, fmt.Errorf("scope %q: unknown; the scopes are %s: %w", errdefs.Clip(n, 32), Scopes(AllScopes), errdefs.ErrInvalidArgument)
		}
		if !out.Has(sc) {
			out = append(out, sc)
		}
	}
	slices.SortFunc(out, func(a, b Scope) int { return slices.Index(AllScopes, a) - slices.Index(AllScopes, b) })
	return out, nil
}

// Has reports whether s holds sc.
func (s Scopes) Has(sc Scope) bool { return slices.Contains(s, sc) }

// String is the scopes space-separated, as stored.
func (s Scopes) String() string {
	parts := make([]string, len(s))
	for i, sc := range s {
		parts[i] = string(sc)
	}
	return strings.Join(parts, " ")
}

// Strings is the scopes as a list of names (for JSON).
func (s Scopes) Strings() []string {
	if len(s) == 0 {
		return []string{}
	}
	return strings.Fields(s.String())
}

// ScopeError is the answer to a token used beyond its scopes: 403 naming the scope
// that what made the request needs.
func ScopeError(need Scope, what string) error {
	return fmt.Errorf("this API token lacks scope %q, which %s needs; make a token with it (POST /api/v1/tokens, paddock token create --scope %s): %w",
		need, what, need, errdefs.ErrPermissionDenied)
}
