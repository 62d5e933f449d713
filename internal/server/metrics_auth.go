package server

import (
	"crypto/subtle"
	"fmt"
	"net/http"
	"os"
	"strings"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/auth"
	"github.com/paddockhq/paddock/internal/errdefs"
)

// minMetricsToken is the shortest metrics token accepted from metrics.token_file.
const minMetricsToken = 32

// loadMetricsToken reads metrics.token_file, if set: one line, at least
// minMetricsToken characters.
func loadMetricsToken(path string) (string, error) {
	if path == "" {
		return "", nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("metrics.token_file %s: %v: %w", path, err, errdefs.ErrInvalidArgument)
	}
	tok := strings.TrimSpace(string(b))
	if len(tok) < minMetricsToken || strings.ContainsAny(tok, " \t\r\n") {
		return "", fmt.Errorf("metrics.token_file %s: want one line of at least %d characters without spaces (openssl rand -hex 32): %w", path, minMetricsToken, errdefs.ErrInvalidArgument)
	}
	return tok, nil
}

// MetricsHandler serves the metrics without asking who is reading: for metrics.listen,
// an address only a scraper reaches.
func (s *Server) MetricsHandler() http.Handler {
	return promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{Registry: s.reg})
}

// metrics serves /metrics on the main listener to the holder of the metrics token
// (metrics.token_file) or to an admin: an admin's session, or an admin's API token with
// scope admin. Anyone else gets 401 or 403 saying what would do.
func (s *Server) metrics() http.Handler {
	h := s.MetricsHandler()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := s.metricsAllowed(r); err != nil {
			api.WriteError(w, s.log, err)
			return
		}
		h.ServeHTTP(w, r)
	})
}

func (s *Server) metricsAllowed(r *http.Request) error {
	if s.metricsToken != "" {
		scheme, tok, _ := strings.Cut(r.Header.Get("Authorization"), " ")
		if strings.EqualFold(scheme, "Bearer") && subtle.ConstantTimeCompare([]byte(strings.TrimSpace(tok)), []byte(s.metricsToken)) == 1 {
			return nil
		}
	}
	c, err := s.web.Identify(r)
	if err != nil {
		return fmt.Errorf("/metrics needs a bearer token: the metrics token (metrics.token_file) or an admin's API token with scope admin: %w", errdefs.ErrUnauthenticated)
	}
	if !c.User.IsAdmin() {
		return fmt.Errorf("GET /metrics is for admins only, and the metrics token (metrics.token_file): %w", errdefs.ErrPermissionDenied)
	}
	return s.checkScope(r, c, auth.ScopeAdmin, "GET /metrics")
}
