package fleet

import (
	"errors"
	"strings"
	"testing"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// A pool configuration naming a template no provider has, a negative size or an
// environment entry that is not NAME=VALUE is refused naming the field; the others are
// taken.
func TestPoolConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name  string
		c     PoolConfig
		field string // "" when valid
		says  string
	}{
		{"none", PoolConfig{}, "", ""},
		{"default and node", PoolConfig{Size: 1, Templates: map[string]int{"node": 2, "go": 0}, Env: []string{"npm_config_registry=http://r/"}}, "", ""},
		{"negative size", PoolConfig{Size: -1}, "pool.size", "-1 is negative"},
		{"unknown template", PoolConfig{Templates: map[string]int{"node": 1, "dotnet": 1}}, "pool.templates", `runtime "dotnet": want one of node, go, rust, static`},
		{"negative template", PoolConfig{Templates: map[string]int{"rust": -2}}, "pool.templates.rust", "-2 is negative"},
		{"bad env", PoolConfig{Templates: map[string]int{"node": 1}, Env: []string{"A=b", "nope"}}, "pool.env", "entry 1: want NAME=VALUE"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.c.Validate()
			if tc.field == "" {
				if err != nil {
					t.Fatalf("validate: %v", err)
				}
				return
			}
			if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.HasPrefix(err.Error(), tc.field+":") || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("validate: %v, want ErrInvalidArgument naming %s and saying %q", err, tc.field, tc.says)
			}
		})
	}
}
