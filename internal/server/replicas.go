package server

import (
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/auth"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/fleet"
	"github.com/paddockhq/paddock/internal/proxy"
	"github.com/paddockhq/paddock/internal/store"
)

// ReplicaConfig makes this `paddock serve` one of several replicas sharing one PostgreSQL
// database (docs/postgres.md#replicas). Without an ID it is the only one.
type ReplicaConfig struct {
	// ID names this replica among the others (a-z, 0-9 and -, up to 32 characters); it
	// must stay the same across restarts, so that the replica finds its sandboxes again.
	ID string `yaml:"id"`
	// Advertise is the host:port at which the other replicas reach this one's listen
	// address, for the requests they forward to the sandboxes it runs.
	Advertise string `yaml:"advertise"`
	// ClusterKeyFile holds the key (one line, base64 of at least 32 bytes) that
	// authenticates requests between replicas: the same file on every replica (an
	// absolute path; default <data_dir>/cluster.key, made on first start if missing).
	ClusterKeyFile string `yaml:"cluster_key_file"`
	// HeartbeatTTL: a replica not heard from for this long is dead, and its sandboxes
	// unreachable, or on a cluster taken over by another (default 15s; it beats every
	// fifth of it).
	HeartbeatTTL time.Duration `yaml:"heartbeat_ttl"`
}

// ClusterKeyFileName is the cluster key's file in the data dir, by default.
const ClusterKeyFileName = "cluster.key"

// defaultHeartbeatTTL is a replica's heartbeat TTL unless configured.
const defaultHeartbeatTTL = 15 * time.Second

var replicaID = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,31}$`)

// check checks the replica settings against the store.
func (rc ReplicaConfig) check(storeURL string) error {
	if rc.ID == "" {
		if rc.Advertise != "" || rc.ClusterKeyFile != "" {
			return fmt.Errorf("replica: advertise and cluster_key_file need an id: %w", errdefs.ErrInvalidArgument)
		}
		return nil
	}
	if !replicaID.MatchString(rc.ID) {
		return fmt.Errorf("replica.id: %q: want a-z, 0-9 and -, up to 32 characters: %w", rc.ID, errdefs.ErrInvalidArgument)
	}
	if storeURL == "" {
		return fmt.Errorf("replica.id: replicas share a PostgreSQL database, and store is SQLite in the data dir (one process only): set store: %w", errdefs.ErrInvalidArgument)
	}
	if host, port, err := net.SplitHostPort(rc.Advertise); err != nil || host == "" || port == "" || port == "0" {
		return fmt.Errorf("replica.advertise: %q: want the host:port the other replicas reach this one at: %w", rc.Advertise, errdefs.ErrInvalidArgument)
	}
	if rc.ClusterKeyFile != "" && !filepath.IsAbs(rc.ClusterKeyFile) {
		return fmt.Errorf("replica.cluster_key_file: %q is not an absolute path: %w", rc.ClusterKeyFile, errdefs.ErrInvalidArgument)
	}
	if rc.HeartbeatTTL < 0 {
		return fmt.Errorf("replica.heartbeat_ttl: %s is negative: %w", rc.HeartbeatTTL, errdefs.ErrInvalidArgument)
	}
	return nil
}

// cluster is what a replica needs to work with the others.
type cluster struct {
	id, advertise string
	key           []byte
	ttl           time.Duration
	forward       *httputil.ReverseProxy
	hopClient     *http.Client // the MCP tools' API requests to the other replicas
	stop          context.CancelFunc
}

// loadClusterKey reads the cluster key from path, making one when the file is missing.
func loadClusterKey(path string) ([]byte, bool, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		key := make([]byte, 32)
		_, _ = rand.Read(key)
		text := base64.StdEncoding.EncodeToString(key) + "\n"
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			return nil, false, fmt.Errorf("replica.cluster_key_file: make %s: %w", path, err)
		}
		return key, true, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("replica.cluster_key_file: %w", err)
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(key) < 32 {
		return nil, false, fmt.Errorf("replica.cluster_key_file: %s: want one line of base64 of at least 32 bytes: %w", path, errdefs.ErrInvalidArgument)
	}
	return key, false, nil
}

// initCluster registers this replica, beats its heartbeat and listens for promotions made
// by the others. Without replicas it only listens (SQLite's notifications are the
// process's own).
func (s *Server) initCluster(ctx context.Context) error {
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	err := s.st.Listen(ctx, fleet.RolesChannel, func(payload string) {
		if user, seq, ok := parseSessionsNote(payload); ok {
			s.auth.SessionsEnded(user)
			s.fleet.ChangeApplied(ctx, seq)
			return
		}
		user, gen, seq, ok := parseRolesNote(payload)
		if !ok {
			// Listening resumed after a lost connection: any user's roles, and any
			// session, may have moved.
			s.fleet.ResyncRoles(ctx)
			return
		}
		s.fleet.RolesChanged(ctx, user, gen, seq)
	})
	if err != nil {
		cancel()
		return err
	}
	rc := s.cfg.Replica
	if rc.ID == "" {
		s.clusterStop = cancel
		return nil
	}
	keyFile := rc.ClusterKeyFile
	if keyFile == "" {
		keyFile = filepath.Join(s.cfg.Runner.DataDir, ClusterKeyFileName)
	}
	key, made, err := loadClusterKey(keyFile)
	if err != nil {
		cancel()
		return err
	}
	if made {
		s.log.Warn("made a cluster key: copy it to every other replica (replica.cluster_key_file)", "file", keyFile)
	}
	// Sessions are cached as the roles are, kept exact by the same notifications.
	s.fleet.OnResync(s.auth.ForgetSessions)
	s.auth.ShareSessions(s.fleet)
	c := &cluster{id: rc.ID, advertise: rc.Advertise, key: key, ttl: cmpDuration(rc.HeartbeatTTL, defaultHeartbeatTTL), stop: cancel}
	c.forward = s.newForwarder(c)
	c.hopClient = newHopClient(c)
	me := store.Replica{ID: c.id, Advertise: c.advertise}
	now := time.Now()
	if err := s.st.Heartbeat(ctx, store.Replica{ID: c.id, Advertise: c.advertise, StartedAt: s.started}, now); err != nil {
		cancel()
		return fmt.Errorf("register replica %s: %w", c.id, err)
	}
	// Listening began above: every change of roles after the one the first beat's resync
	// reads is notified.
	s.fleet.Beat(ctx, now)
	go func() {
		t := time.NewTicker(c.ttl / 5)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				now := time.Now()
				if err := s.st.Heartbeat(ctx, me, now); err != nil {
					if ctx.Err() == nil {
						s.log.Warn("replica heartbeat", "replica", c.id, "err", err)
					}
					continue
				}
				s.fleet.Beat(ctx, now)
				s.fleet.Sweep(ctx)
			}
		}
	}()
	s.cluster, s.clusterStop = c, cancel
	return nil
}

// parseRolesNote reads a notification of fleet.RolesChannel: "USERID GENERATION SEQ".
func parseRolesNote(payload string) (user string, gen, seq int64, ok bool) {
	f := strings.Fields(payload)
	if len(f) != 3 {
		return "", 0, 0, false
	}
	gen, err1 := strconv.ParseInt(f[1], 10, 64)
	seq, err2 := strconv.ParseInt(f[2], 10, 64)
	return f[0], gen, seq, err1 == nil && err2 == nil
}

// parseSessionsNote reads a notification that sessions of user ended.
func parseSessionsNote(payload string) (user string, seq int64, ok bool) {
	f := strings.Fields(payload)
	if len(f) != 3 || f[0] != fleet.SessionsNote {
		return "", 0, false
	}
	seq, err := strconv.ParseInt(f[2], 10, 64)
	return f[1], seq, err == nil
}

var _ auth.Cluster = (*fleet.Fleet)(nil)

func cmpDuration(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// The hop between replicas: a forwarded request carries HopHeader, "v1 FROM AT USER MAC",
// where MAC is an HMAC-SHA256 under the cluster key of the rest and of the request's
// method, host and URI; USER is the user the forwarding replica authenticated ("-" for
// none). A client's own HopHeader is removed before anything reads the request.
const HopHeader = "Paddock-Replica-Hop"

// hopSkew bounds how old (or how far ahead) a hop's time may be.
const hopSkew = time.Minute

type hopKey struct{}

// hop is what an authenticated hop says about a request.
type hop struct {
	from, user string
}

func (c *cluster) mac(from, at, user string, r *http.Request) string {
	m := hmac.New(sha256.New, c.key)
	fmt.Fprintf(m, "v1\n%s\n%s\n%s\n%s\n%s\n%s", from, at, user, r.Method, strings.ToLower(r.Host), r.URL.RequestURI())
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// sign marks r as forwarded by this replica for user.
func (c *cluster) sign(r *http.Request, user string) {
	if user == "" {
		user = "-"
	}
	at := strconv.FormatInt(time.Now().Unix(), 10)
	r.Header.Set(HopHeader, strings.Join([]string{"v1", c.id, at, user, c.mac(c.id, at, user, r)}, " "))
}

// acceptHops reads and removes HopHeader from every request: one the cluster key
// authenticates puts a *hop in the request's context; any other is dropped, logged.
func (s *Server) acceptHops(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v, ok := r.Header[HopHeader]
		if !ok {
			if isHandOn(r) {
				s.acceptHandOn(w, r) // refused: unsigned
				return
			}
			next.ServeHTTP(w, r)
			return
		}
		r.Header.Del(HopHeader)
		if h, err := s.checkHop(r, v); err != nil {
			s.log.Warn("request with a replica hop header that does not authenticate: ignored", "host", r.Host, "from", r.RemoteAddr, "err", err)
		} else {
			r = r.WithContext(context.WithValue(r.Context(), hopKey{}, h))
		}
		if isHandOn(r) {
			s.acceptHandOn(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (s *Server) checkHop(r *http.Request, v []string) (*hop, error) {
	c := s.cluster
	if c == nil {
		return nil, errors.New("this server is no replica")
	}
	if len(v) != 1 {
		return nil, errors.New("more than one")
	}
	f := strings.Split(v[0], " ")
	if len(f) != 5 || f[0] != "v1" {
		return nil, errors.New("not v1 FROM AT USER MAC")
	}
	at, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil {
		return nil, errors.New("AT is not a Unix time")
	}
	if d := time.Since(time.Unix(at, 0)); d > hopSkew || d < -hopSkew {
		return nil, fmt.Errorf("AT is %s away from now", d.Round(time.Second))
	}
	if !hmac.Equal([]byte(f[4]), []byte(c.mac(f[1], f[2], f[3], r))) {
		return nil, errors.New("its MAC is wrong (another cluster key?)")
	}
	h := &hop{from: f[1]}
	if f[3] != "-" {
		h.user = f[3]
	}
	return h, nil
}

// hopOf is the authenticated hop a request came over, or nil.
func hopOf(r *http.Request) *hop {
	h, _ := r.Context().Value(hopKey{}).(*hop)
	return h
}

type forwardKey struct{}

// forwardTo is where forward sends a request: a replica, and the user it is for; what
// says why that replica ("which runs this sandbox" unless set).
type forwardTo struct {
	replica store.Replica
	user    string
	what    string
	// fallback, when set, answers a request the replica did not take (err says why)
	// instead of a 503.
	fallback func(w http.ResponseWriter, err error)
}

func (s *Server) newForwarder(c *cluster) *httputil.ReverseProxy {
	dial := (&net.Dialer{Timeout: 5 * time.Second}).DialContext
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			to := pr.In.Context().Value(forwardKey{}).(forwardTo)
			pr.Out.URL.Scheme, pr.Out.URL.Host = "http", to.replica.Advertise
			pr.Out.Host = pr.In.Host
			c.sign(pr.Out, to.user)
		},
		// Kept-alive connections to each replica, a request without a body exchanged in
		// the handler's goroutine (no hand-off to http.Transport's two per connection).
		Transport: proxy.NewDirectTransport(dial, &http.Transport{
			DialContext:         dial,
			MaxIdleConnsPerHost: 64,
			IdleConnTimeout:     time.Minute,
		}),
		// A stream (SSE, or a body of unknown length) is flushed at every write all the
		// same; a body of known length goes out as the buffer fills.
		FlushInterval: 0,
		BufferPool:    proxy.BufferPool(),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			to := r.Context().Value(forwardKey{}).(forwardTo)
			what := cmp.Or(to.what, "which runs this sandbox")
			err = fmt.Errorf("replica %s (%s), %s, did not answer: %w: %w", to.replica.ID, to.replica.Advertise, what, errdefs.ErrUnavailable, err)
			if to.fallback != nil {
				to.fallback(w, err)
				return
			}
			api.WriteError(w, s.log, err)
		},
	}
}

// forwardIfElsewhere sends r, for sandbox id, to the replica that runs it, when that is
// another one; it reports whether r was answered (forwarded, or 503 for a replica that is
// dead, unless orphanOK: a sandbox may always be deleted). On a cluster a dead replica's
// sandbox is taken over first (fleet.Route), and served here or by the replica that won
// it. A request that came over a hop is never forwarded again.
func (s *Server) forwardIfElsewhere(w http.ResponseWriter, r *http.Request, id, user string, orphanOK bool) bool {
	return s.sendIfElsewhere(w, r, id, user, orphanOK, false)
}

// handOnIfElsewhere is forwardIfElsewhere for an apps or desktop host: the client's
// connection is handed on to the sandbox's replica where it can be (handon.go), and this
// request forwarded where it cannot.
func (s *Server) handOnIfElsewhere(w http.ResponseWriter, r *http.Request, id, user string) bool {
	return s.sendIfElsewhere(w, r, id, user, false, true)
}

func (s *Server) sendIfElsewhere(w http.ResponseWriter, r *http.Request, id, user string, orphanOK, handOn bool) bool {
	if s.cluster == nil || hopOf(r) != nil || id == "" {
		return false
	}
	err := s.fleet.Route(r.Context(), id)
	var held *store.HeldElsewhere
	switch {
	case err == nil:
		return false
	case errors.As(err, &held) && held.Alive:
		if handOn && s.handOn(w, r, held.Replica) {
			return true
		}
		s.m.forwarded.WithLabelValues(held.Replica.ID).Inc()
		ctx := context.WithValue(r.Context(), forwardKey{}, forwardTo{replica: held.Replica, user: user})
		s.cluster.forward.ServeHTTP(w, r.WithContext(ctx))
		return true
	case errors.Is(err, errdefs.ErrNotFound):
		return false // the handler says so, in its words
	case orphanOK && held != nil:
		s.log.Warn("deleting a sandbox whose replica is dead: what it left on that replica's host stays there",
			"sandbox", id, "replica", held.Replica.ID)
		return false
	}
	api.WriteError(w, s.log, err)
	return true
}

// sharedReconnects counts WebSocket attempts in the database when replicas share it,
// so that a user's reconnect storm is one storm whichever replicas serve it.
func (s *Server) sharedReconnects() func(context.Context, string, time.Time, time.Duration, int) (bool, time.Duration, bool, error) {
	if s.cfg.Replica.ID == "" {
		return nil
	}
	return s.st.ReconnectAttempt
}

// closeCluster stops the heartbeat and the listener.
func (s *Server) closeCluster() {
	if s.clusterStop != nil {
		s.clusterStop()
	}
}
