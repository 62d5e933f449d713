package server

import (
	"net/http"
	"strconv"

	"github.com/paddockhq/paddock/internal/fleet"
)

// historyEvents lists a sandbox's timeline events (recorded by sandboxops.FollowHistory),
// oldest first, after the cursor given: it answers whether the sandbox runs or not.
func (s *Server) historyEvents(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	if _, err := s.fleet.Get(r.Context(), c, r.PathValue("id")); err != nil {
		return err // another user's sandbox is not found, whatever the query
	}
	var after int64
	limit := 100
	q := r.URL.Query()
	if v := q.Get("after"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return invalidQuery("after", v, "an event ID (a number, 0 or more)")
		}
		after = n
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			return invalidQuery("limit", v, "a number from 1 to 1000")
		}
		limit = n
	}
	out, err := s.ops.HistoryEvents(r.Context(), c, r.PathValue("id"), after, limit)
	return writeOr(w, http.StatusOK, out, err)
}
