package auth

import (
	"slices"
	"strings"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/store"
)

// The scopes are the API's (package api, which the CLI links without the server's
// packages); auth keeps their names for the server's code.
type (
	Scope  = api.Scope
	Scopes = api.Scopes
)

// The scopes, from the narrowest up (api.ScopeRead …).
const (
	ScopeRead   = api.ScopeRead
	ScopeWrite  = api.ScopeWrite
	ScopeTokens = api.ScopeTokens
	ScopeAdmin  = api.ScopeAdmin
)

var (
	// AllScopes lists the scopes in their canonical order.
	AllScopes = api.AllScopes
	// DefaultScopes are a new token's scopes when its request names none.
	DefaultScopes = api.DefaultScopes
)

// ParseScopes is api.ParseScopes.
func ParseScopes(s string) (Scopes, error) { return api.ParseScopes(s) }

// ScopesOf is api.ScopesOf.
func ScopesOf(names []string) (Scopes, error) { return api.ScopesOf(names) }

// ScopeError is api.ScopeError.
func ScopeError(need Scope, what string) error { return api.ScopeError(need, what) }

// UserScopes are the scopes u may have: all but admin, and admin for an admin.
func UserScopes(u User) Scopes {
	if u.IsAdmin() {
		return slices.Clone(Scopes(AllScopes))
	}
	return Scopes{ScopeRead, ScopeWrite, ScopeTokens}
}

// TokenScopes are the scopes a stored token holds. Stored scopes were checked when the
// token was made; a name this version does not know is ignored.
func TokenScopes(t store.APIToken) Scopes {
	var out Scopes
	for _, w := range strings.Fields(t.Scopes) {
		if slices.Contains(AllScopes, Scope(w)) && !out.Has(Scope(w)) {
			out = append(out, Scope(w))
		}
	}
	return out
}
