package server

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/fleet"
	"github.com/paddockhq/paddock/internal/origins"
	pb "github.com/paddockhq/paddock/internal/wire/agentv1"
)

// appStatus is GET /api/v1/sandboxes/{id}/app: the supervised app's state from the
// sandbox's agent, which answers whatever the app is doing (crashed and crash-looping
// included).
func (s *Server) appStatus(w http.ResponseWriter, r *http.Request, c fleet.Caller) error {
	conn, err := s.fleet.Conn(r.Context(), c, r.PathValue("id"))
	if err != nil {
		return err
	}
	st, err := pb.NewAgentClient(conn).App(r.Context(), &pb.AppRequest{})
	if err != nil {
		return fmt.Errorf("the app of sandbox %s: %w", r.PathValue("id"), errdefs.FromGRPC(err))
	}
	out := appStatusOf(st)
	out.URL = s.origins.URL(origins.Host{Kind: origins.KindApp, ID: r.PathValue("id")}, r.Host)
	api.WriteJSON(w, http.StatusOK, out)
	return nil
}

func appStatusOf(st *pb.AppStatus) api.AppStatus {
	out := api.AppStatus{
		State: st.GetState(), Restarts: int(st.GetRestarts()),
		Since:      time.Unix(0, st.GetSinceUnixNano()).UTC(),
		LastOutput: strings.ToValidUTF8(string(st.GetLastOutput()), "\uFFFD"),
	}
	if n := st.GetNextStartUnixNano(); n != 0 {
		t := time.Unix(0, n).UTC()
		out.NextStart = &t
	}
	if e := st.GetLastExit(); e != nil {
		out.LastExit = &api.AppExit{ExitCode: int(e.GetExitCode()), Signal: int(e.GetSignal()), Error: e.GetError()}
	}
	return out
}
