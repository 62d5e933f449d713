package sandboxops

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/fleet"
	pb "github.com/paddockhq/paddock/internal/wire/agentv1"
)

// AppStatus is the state of sandbox id's supervised app, from its agent, which answers
// whatever the app is doing (crashed and crash-looping included). The URL is the front
// door's to fill in: it knows the host it was reached on.
func (o *Ops) AppStatus(ctx context.Context, c fleet.Caller, id string) (api.AppStatus, error) {
	agent, err := o.fleet.Agent(ctx, c, id)
	if err != nil {
		return api.AppStatus{}, err
	}
	st, err := agent.App(ctx)
	if err != nil {
		return api.AppStatus{}, fmt.Errorf("the app of sandbox %s: %w", id, err)
	}
	return appStatusOf(st), nil
}

// RestartApp starts the sandbox's app again now, on what its workspace holds.
func (o *Ops) RestartApp(ctx context.Context, c fleet.Caller, id string) (api.AppStatus, error) {
	agent, err := o.fleet.Agent(ctx, c, id)
	if err != nil {
		return api.AppStatus{}, err
	}
	st, err := agent.RestartApp(ctx)
	if err != nil {
		return api.AppStatus{}, fmt.Errorf("restarting the app of sandbox %s: %w", id, err)
	}
	return appStatusOf(st), nil
}

func appStatusOf(st *pb.AppStatus) api.AppStatus {
	out := api.AppStatus{
		State: st.GetState(), Restarts: int(st.GetRestarts()),
		Since:           time.Unix(0, st.GetSinceUnixNano()).UTC(),
		Output:          text(st.GetOutput()),
		OutputTruncated: st.GetOutputTruncated(),
		LastOutput:      text(st.GetLastOutput()), LastOutputTruncated: st.GetLastOutputTruncated(),
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

// text is an app's output as JSON can carry it: invalid UTF-8 (a cut rune, binary) replaced.
func text(b []byte) string { return strings.ToValidUTF8(string(b), "\uFFFD") }
