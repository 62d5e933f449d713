package egress

import (
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// A sandbox that never reads its download holds the upstream back, over plain HTTP and
// through a CONNECT tunnel: the proxy relays only what the sandbox takes, so the host
// queues no more of the body than the sockets' buffers hold.
func TestDownloadFlowControl(t *testing.T) {
	const body, most = 256 << 20, 64 << 20
	for _, scheme := range []string{"http", "https"} {
		t.Run(scheme, func(t *testing.T) {
			h := newHarness(t, nil)
			var written atomic.Int64
			stop := make(chan struct{})
			handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Length", strconv.Itoa(body))
				chunk := make([]byte, 64<<10)
				for written.Load() < body {
					n, err := w.Write(chunk)
					written.Add(int64(n))
					if err != nil {
						return
					}
					select {
					case <-stop:
						return
					default:
					}
				}
			})
			srv, port := h.plain, h.pport
			if scheme == "https" {
				srv, port = h.secure, h.sport
			}
			srv.Config.Handler = handler
			res, err := h.client(nil).Get(fmt.Sprintf("%s://allowed.test:%d/blob", scheme, port))
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			defer close(stop)
			// Wait until the upstream's writes stop moving: the buffers between it and the
			// client are full.
			last, still := int64(-1), 0
			for still < 5 {
				time.Sleep(100 * time.Millisecond)
				n := written.Load()
				if n >= body {
					t.Fatalf("the upstream wrote the whole %d-byte body to a client that read none of it", body)
				}
				if n == last {
					still++
				} else {
					last, still = n, 0
				}
			}
			if last > most {
				t.Errorf("the upstream wrote %d bytes to a client that read none: more than %d were queued", last, most)
			}
		})
	}
}
