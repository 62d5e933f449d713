package sandboxops

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/fleet"
)

// A backup's record proves ownership, for a sandbox the database no longer has, only by
// the owner's user ID and username both; one of the two is refused (403), neither is the
// sandbox not being found.
func TestRecordOwnedBy(t *testing.T) {
	missing := fmt.Errorf("sandbox sb-x: %w", errdefs.ErrNotFound)
	alice := fleet.Caller{UserID: "u-alice", Username: "alice"}
	for _, tc := range []struct {
		name, record string
		want         error
	}{
		{"same ID and name", `{"owner":"alice","owner_id":"u-alice"}`, nil},
		{"same ID and name, in another case", `{"owner":"Alice","owner_id":"u-alice"}`, nil},
		{"same name, another ID (a new account)", `{"owner":"alice","owner_id":"u-old"}`, errdefs.ErrPermissionDenied},
		{"same name, no ID (an older backup)", `{"owner":"alice"}`, errdefs.ErrPermissionDenied},
		{"same ID, another name", `{"owner":"alicia","owner_id":"u-alice"}`, errdefs.ErrPermissionDenied},
		{"another user's", `{"owner":"bob","owner_id":"u-bob"}`, errdefs.ErrNotFound},
		{"no owner", `{"name":"x"}`, errdefs.ErrNotFound},
		{"no record", ``, errdefs.ErrNotFound},
		{"not JSON", `{`, errdefs.ErrNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := recordOwnedBy(json.RawMessage(tc.record), alice, "sb-x", missing)
			if (tc.want == nil) != (err == nil) || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Errorf("recordOwnedBy(%s) = %v, want %v", tc.record, err, tc.want)
			}
		})
	}
}
