package fleet

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/store"
)

// A create request's tmp and file size are recorded in bytes and reach the runner's
// limits; a bad one is refused naming its field.
func TestCreateRequestSizes(t *testing.T) {
	fl := &Fleet{cfg: Config{Memory: 512 << 20, App: store.App{Command: []string{"app"}, Port: 8080}}, now: time.Now}
	c := Caller{UserID: "u", Username: "u"}
	rec, err := fl.newRecord(c, api.CreateSandboxRequest{Limits: api.Limits{Tmp: "64M", FileSize: "1GiB", Disk: "2G"}})
	if err != nil || rec.TmpBytes != 64<<20 || rec.FileSizeBytes != 1<<30 || rec.DiskBytes != 2<<30 {
		t.Fatalf("newRecord: %+v, %v", rec, err)
	}
	if l := limitsOf(rec); l.Tmp != 64<<20 || l.FileSize != 1<<30 || l.Memory != 512<<20 || l.Disk != 2<<30 {
		t.Errorf("limitsOf = %+v", l)
	}
	if rec, err := fl.newRecord(c, api.CreateSandboxRequest{}); err != nil || rec.TmpBytes != 0 || rec.FileSizeBytes != 0 {
		t.Errorf("newRecord without sizes: %+v, %v; want none set", rec, err)
	}
	for _, tt := range []struct {
		l     api.Limits
		field string
	}{
		{api.Limits{Tmp: "lots"}, "limits.tmp"},
		{api.Limits{Tmp: "0"}, "limits.tmp"},
		{api.Limits{FileSize: "-1"}, "limits.file_size"},
		{api.Limits{FileSizeBytes: 10}, "limits: tmp_bytes, file_size_bytes and disk_bytes are read-only"},
		{api.Limits{TmpBytes: 10}, "limits: tmp_bytes, file_size_bytes and disk_bytes are read-only"},
		{api.Limits{DiskBytes: 10}, "limits: tmp_bytes, file_size_bytes and disk_bytes are read-only"},
		{api.Limits{Disk: "lots"}, "limits.disk"},
		{api.Limits{Disk: "1M"}, "limits.disk: 1MiB is below the smallest disk (64MiB)"},
	} {
		_, err := fl.newRecord(c, api.CreateSandboxRequest{Limits: tt.l})
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tt.field) {
			t.Errorf("newRecord(%+v) = %v, want an invalid argument naming %s", tt.l, err, tt.field)
		}
	}
}
