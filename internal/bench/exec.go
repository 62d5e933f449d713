package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/paddockhq/paddock/internal/runner"
	"github.com/paddockhq/paddock/internal/sandbox/agentclient"
	pb "github.com/paddockhq/paddock/internal/wire/agentv1"
)

// ExecSandbox is a running sandbox to exec into, kept alive by a main command that sleeps.
type ExecSandbox struct {
	*runner.Sandbox
	env    *Env
	client *agentclient.Client
}

// StartExecSandbox creates a sandbox through the runner and waits until its agent answers.
func (e *Env) StartExecSandbox(ctx context.Context) (*ExecSandbox, error) {
	sb, err := e.Runner.Create(ctx, runner.Spec{User: benchUser, Main: []string{"sleep", "3600"}})
	if err != nil {
		return nil, err
	}
	s := &ExecSandbox{Sandbox: sb, env: e, client: sb.Agent()}
	if _, err := s.AgentExec(ctx); err != nil {
		_ = sb.Destroy(context.WithoutCancel(ctx))
		return nil, err
	}
	return s, nil
}

// AgentExec times one round trip of `true` through the agent's Execute.
func (s *ExecSandbox) AgentExec(ctx context.Context) (time.Duration, error) {
	start := time.Now()
	resp, err := s.client.Execute(ctx, &pb.ExecuteRequest{Argv: []string{"true"}})
	d := time.Since(start)
	if err != nil {
		return d, fmt.Errorf("execute true: %w", err)
	}
	if st := resp.GetStatus(); st.GetExitCode() != 0 || st.GetSignal() != 0 || st.GetError() != "" {
		return d, fmt.Errorf("execute true: %v", st)
	}
	return d, nil
}

// RuncExec times `runc exec <id> true` into the same container, under the runtime state
// the runner keeps (<state_dir>/runc).
func (s *ExecSandbox) RuncExec(ctx context.Context) (time.Duration, error) {
	cmd := command(ctx, s.env.Runc, "--root", filepath.Join(s.env.Config.StateDir, "runc"), "exec", s.ID, "true")
	var stderr tailBuffer
	cmd.Stderr = &stderr
	start := time.Now()
	err := cmd.Run()
	d := time.Since(start)
	if err != nil {
		return d, fmt.Errorf("runc exec %s true: %w: %s", s.ID, err, strings.TrimSpace(stderr.String()))
	}
	return d, nil
}
