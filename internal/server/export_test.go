package server

import (
	"context"
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
