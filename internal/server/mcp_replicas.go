package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/paddockhq/paddock"
	"github.com/paddockhq/paddock/internal/errdefs"
	pmcp "github.com/paddockhq/paddock/internal/mcp"
	"github.com/paddockhq/paddock/internal/runner"
	"github.com/paddockhq/paddock/internal/store"
)

// mcpAuthKey carries the Authorization header of the MCP request a tool runs for.
type mcpAuthKey struct{}

// keepAuthorization puts the MCP request's Authorization header in the context of what it
// calls: a tool acting on a sandbox another replica runs sends it on, to be checked there.
func keepAuthorization(next sdk.MethodHandler) sdk.MethodHandler {
	return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
		if ex := req.GetExtra(); ex != nil && ex.Header != nil {
			ctx = context.WithValue(ctx, mcpAuthKey{}, ex.Header.Get("Authorization"))
		}
		return next(ctx, method, req)
	}
}

// hopTransport sends an API request to another replica over the hop, with the MCP
// caller's own credentials (from the request's context): that replica authenticates
// them again, checks the token's scope, and serves the request as any other.
type hopTransport struct {
	c    *cluster
	next http.RoundTripper
}

func (t hopTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if a, _ := r.Context().Value(mcpAuthKey{}).(string); a != "" {
		r.Header.Set("Authorization", a)
	}
	if r.Host == "" {
		r.Host = r.URL.Host
	}
	t.c.sign(r, "")
	return t.next.RoundTrip(r)
}

// newHopClient is the HTTP client of the MCP tools' requests to the other replicas.
func newHopClient(c *cluster) *http.Client {
	dial := (&net.Dialer{Timeout: 5 * time.Second}).DialContext
	return &http.Client{Transport: hopTransport{c: c, next: &http.Transport{
		DialContext:         dial,
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     time.Minute,
	}}}
}

// remote is the Backend of a sandbox another replica runs: its API, reached over the hop.
type remote struct {
	pmcp.Client
	replica store.Replica
}

// failed names the replica when it did not answer; an error it answered stays as it is.
func (r remote) failed(err error) error {
	var answered *paddock.Error
	if err == nil || errors.As(err, &answered) || !errors.Is(err, errdefs.ErrUnavailable) {
		return err
	}
	return fmt.Errorf("replica %s (%s), which runs this sandbox, did not answer: %w", r.replica.ID, r.replica.Advertise, err)
}

// elsewhere is the Backend of sandbox id when another live replica runs it, or nil when
// this one does (or the sandbox is unknown: the local operation says so in its words). A
// sandbox whose replica is dead is an error naming that replica, unless orphanOK (it
// may be deleted here).
func (b *opsBackend) elsewhere(ctx context.Context, id string, orphanOK bool) (*remote, error) {
	c := b.s.cluster
	if c == nil || !runner.ValidID(id) {
		return nil, nil
	}
	err := b.s.fleet.Holder(ctx, id)
	var held *store.HeldElsewhere
	switch {
	case err == nil, errors.Is(err, errdefs.ErrNotFound):
		return nil, nil
	case errors.As(err, &held) && held.Alive:
		b.s.m.forwarded.WithLabelValues(held.Replica.ID).Inc()
		cl := paddock.New("http://"+held.Replica.Advertise, paddock.WithHTTPClient(c.hopClient))
		return &remote{Client: pmcp.Client{C: cl}, replica: held.Replica}, nil
	case orphanOK && held != nil:
		return nil, nil
	}
	return nil, err
}

// onHolder runs do on the Backend of the replica that runs sandbox id when that is
// another one; ok says whether it did.
func onHolder[T any](ctx context.Context, b *opsBackend, id string, do func(pmcp.Backend) (T, error)) (v T, ok bool, err error) {
	r, err := b.elsewhere(ctx, id, false)
	if err != nil || r == nil {
		return v, err != nil, err
	}
	v, err = do(r)
	return v, true, r.failed(err)
}
