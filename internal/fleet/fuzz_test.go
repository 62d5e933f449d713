package fleet

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/store"
)

// FuzzCreateRequest feeds arbitrary bodies through the API's strict decoder and the
// fleet's checks of a create request: whatever the bytes, the answer is a record or an
// invalid-argument error, never a panic and never another kind of error.
func FuzzCreateRequest(f *testing.F) {
	for _, s := range []string{
		`{}`, `{"name":"web","tier":"container","runtime":"runsc","limits":{"memory":"512M","cpus":1.5,"pids":64}}`,
		`{"app":{"command":["node","server.js"],"port":3000,"build":"v1"},"env":["A=1"]}`,
		`{"name":"-x"}`, `{"limits":{"memory":"1e30G"}}`, `{"app":{"command":[""],"port":1}}`, `{"env":["=x"]}`,
		`{"tier":"process"}`, `{"limits":{"memory_bytes":5}}`, `{"app":{"command":["a\u0000b"],"port":80}}`,
		`{"limits":{"tmp":"64M","file_size":"1G"}}`, `{"limits":{"tmp":"-1","file_size_bytes":3}}`,
	} {
		f.Add([]byte(s))
	}
	fl := &Fleet{cfg: Config{Memory: 512 << 20, App: store.App{Command: []string{"app"}, Port: 8080}}, now: time.Now}
	f.Fuzz(func(t *testing.T, body []byte) {
		var req api.CreateSandboxRequest
		if err := api.Decode(bytes.NewReader(body), &req, api.MaxJSONBody); err != nil {
			if !errors.Is(err, errdefs.ErrInvalidArgument) && !errors.Is(err, api.ErrTooLarge) {
				t.Fatalf("decode error outside the taxonomy: %v", err)
			}
			return
		}
		rec, err := fl.newRecord(Caller{UserID: "u", Username: "u"}, req)
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("check error outside the taxonomy: %v", err)
			}
			return
		}
		if checkName(rec.Name) != nil || len(rec.App.Command) == 0 || rec.App.Port < 1 || rec.App.Port > 65535 || rec.MemoryBytes <= 0 ||
			rec.TmpBytes < 0 || rec.FileSizeBytes < 0 {
			t.Fatalf("accepted an invalid record: %+v", rec)
		}
	})
}
