package server

import (
	"context"
	"math"
	"time"

	"github.com/paddockhq/paddock/internal/gateway"
	"github.com/paddockhq/paddock/internal/store"
)

// sharedRates keeps the gateway's request buckets in the store, so that replicas count a
// user's requests against one rate whichever of them the requests reach. Each request
// takes a write transaction, which is why one control plane keeps its buckets in memory.
type sharedRates struct{ st *store.Store }

var _ gateway.Rates = sharedRates{}

// Take implements gateway.Rates: the bucket is read, spent and written back in one write
// transaction, which the replicas take one at a time.
func (r sharedRates) Take(ctx context.Context, userID, provider string, perMinute int, now time.Time) (ok bool, wait time.Duration, err error) {
	err = r.st.SpendRate(ctx, userID, provider, func(row store.RateBucket) store.RateBucket {
		b := gateway.Bucket{Tokens: float64(row.Micros) / 1e6, Last: row.Last}
		ok, wait = b.Take(perMinute, now)
		return store.RateBucket{Micros: int64(math.Round(b.Tokens * 1e6)), Last: b.Last}
	})
	return ok, wait, err
}

// gatewayRates is where the gateway keeps its request buckets: the store when replicas
// share it, else memory (nil).
func (s *Server) gatewayRates() gateway.Rates {
	if s.cfg.Replica.ID == "" {
		return nil
	}
	return sharedRates{s.st}
}
