package fleet

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// An idle configuration that could never act, or makes no sense, is refused naming the
// field; the others are taken.
func TestIdleConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name  string
		c     IdleConfig
		field string // "" when valid
	}{
		{"none", IdleConfig{}, ""},
		{"stop only", IdleConfig{After: time.Minute}, ""},
		{"freeze only", IdleConfig{FreezeAfter: time.Minute}, ""},
		{"freeze then stop", IdleConfig{FreezeAfter: time.Minute, After: time.Hour}, ""},
		{"negative after", IdleConfig{After: -time.Second}, "idle.after"},
		{"negative freeze", IdleConfig{FreezeAfter: -time.Second}, "idle.freeze_after"},
		{"freeze after the stop", IdleConfig{FreezeAfter: time.Hour, After: time.Minute}, "idle.freeze_after"},
		{"freeze with the stop", IdleConfig{FreezeAfter: time.Minute, After: time.Minute}, "idle.freeze_after"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.c.validate()
			if tc.field == "" {
				if err != nil {
					t.Fatalf("validate: %v", err)
				}
				return
			}
			if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.HasPrefix(err.Error(), tc.field+":") {
				t.Fatalf("validate: %v, want ErrInvalidArgument naming %s", err, tc.field)
			}
		})
	}
}
