package server

import (
	"context"
	"net/http"
	"time"

	"github.com/paddockhq/paddock/internal/store"
)

// HistoryFollowers is how many sandboxes' history events are followed now.
func (s *Server) HistoryFollowers() int64 { return s.ops.Followers() }

// GatewaySpent is what the gateway's ledger holds for userID on provider today.
func (s *Server) GatewaySpent(userID, provider string) (int64, error) {
	return s.st.Usage(context.Background(), userID, provider, utcMidnight(time.Now()))
}

// Store is the server's database.
func (s *Server) Store() *store.Store { return s.st }

// HandOnPath and HandOnProto are the hand-on's upgrade.
const HandOnPath, HandOnProto = handOnPath, handOnProto

// SignHop signs r as a hop from replica from under the cluster key key.
func SignHop(key []byte, from string, r *http.Request) { (&cluster{id: from, key: key}).sign(r, "") }

// HandOnPreamble is the preamble of a hand-on for a client at addr (over TLS when
// secure), under key and nonce.
func HandOnPreamble(key, nonce []byte, secure bool, client string) []byte {
	return signedPreamble(key, nonce, secure, client).append(nil)
}
