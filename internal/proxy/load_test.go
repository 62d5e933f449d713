package proxy

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/paddockhq/paddock/internal/api"
)

// ownerAt is the live owner after gen swaps: the harness starts with sb-live live.
func ownerAt(gen int64) string {
	if gen%2 == 0 {
		return "sb-live"
	}
	return "sb-dev"
}

// servedByCurrentOwner reports whether id owned the live role at some generation in
// [from, to]: the owner when the request started, or a later one.
func servedByCurrentOwner(id string, from, to int64) bool {
	for g := from; g <= to && g <= from+1; g++ {
		if ownerAt(g) == id {
			return true
		}
	}
	return false
}

// TestPromotionUnderLoad swaps owners over and over while clients send HTTP requests
// and hold WebSockets. No request may fail, each must be served by the owner current
// at its start or later, and WebSockets may close only with 4001.
func TestPromotionUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("load test: skipped in -short mode")
	}
	h := newHarness(t, Options{ReconnectLimit: 1 << 20})
	ctx, stop := context.WithTimeout(t.Context(), 3*time.Second)
	defer stop()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	defer client.CloseIdleConnections()

	var wg sync.WaitGroup
	var requests, reconnects, swaps atomic.Int64
	wg.Go(func() {
		for ctx.Err() == nil {
			h.p.OwnerChanged("u1", h.router.swap())
			swaps.Add(1)
			time.Sleep(15 * time.Millisecond)
		}
	})
	for range 16 {
		wg.Go(func() {
			for ctx.Err() == nil {
				if err := loadRequest(h, client); err != nil {
					t.Error(err)
					return
				}
				requests.Add(1)
			}
		})
	}
	for range 8 {
		wg.Go(func() {
			for ctx.Err() == nil {
				n, err := holdWebSocket(ctx, h)
				if err != nil {
					t.Error(err)
					return
				}
				reconnects.Add(n)
			}
		})
	}
	wg.Wait()
	t.Logf("%d swaps, %d HTTP requests, %d WebSocket reconnects after 4001", swaps.Load(), requests.Load(), reconnects.Load())
	if requests.Load() == 0 || reconnects.Load() == 0 {
		t.Error("the load test exercised nothing")
	}
}

func loadRequest(h *harness, client *http.Client) error {
	_, from := h.router.owner()
	res, err := client.Get(h.front.URL + "/")
	if err != nil {
		return err
	}
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	_, to := h.router.owner()
	id := string(body)
	switch {
	case err != nil:
		return err
	case res.StatusCode != 200:
		return errors.New("status " + res.Status + ": " + id)
	case res.Header.Get(api.HeaderSandbox) != id:
		return errors.New("X-Paddock-Sandbox " + res.Header.Get(api.HeaderSandbox) + " but served by " + id)
	case !servedByCurrentOwner(id, from, to):
		return errors.New("served by " + id + ", not the owner at the request's start or later")
	}
	return nil
}

// holdWebSocket connects, checks it reached a current owner, and talks until the
// connection is closed; it returns 1 when that close was a 4001.
func holdWebSocket(ctx context.Context, h *harness) (int64, error) {
	_, from := h.router.owner()
	c, _, err := websocket.Dial(ctx, h.wsURL("/ws"), nil)
	if err != nil {
		if ctx.Err() != nil {
			return 0, nil
		}
		return 0, err
	}
	defer c.CloseNow()
	first := ""
	for {
		id, err := who(context.Background(), c)
		if err != nil {
			if code := websocket.CloseStatus(err); code == api.CloseOwnerChanged {
				return 1, nil
			}
			return 0, errors.New("WebSocket closed other than with 4001: " + err.Error())
		}
		if first == "" {
			_, to := h.router.owner()
			if !servedByCurrentOwner(id, from, to) {
				return 0, errors.New("WebSocket reached " + id + ", not a current owner")
			}
			first = id
		} else if id != first {
			return 0, errors.New("a WebSocket moved from " + first + " to " + id)
		}
		if ctx.Err() != nil {
			c.Close(websocket.StatusNormalClosure, "")
			return 0, nil
		}
		time.Sleep(2 * time.Millisecond)
	}
}
