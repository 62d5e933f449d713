package fleet

import (
	"context"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/provider"
	"github.com/paddockhq/paddock/internal/runner"
	pb "github.com/paddockhq/paddock/internal/wire/agentv1"
)

// Template pools. A provider's template pool keeps container sandboxes (started as the
// default pool's are) in whose workspace the provider's template is scaffolded, as
// templateProject, and its dependencies resolved. A new project of that runtime takes the
// resolved files of one (Member.Export) instead of resolving them, and the member is then
// discarded: it is never handed out twice, nor its sandbox to a user.

// templateProject is the template's directory and project name in a member's workspace.
const templateProject = "project"

// memberOutput bounds what a readying command's output the error quotes.
const memberOutput = 64 << 10

// newTemplatePools makes the pools cfg.Pool.Templates asks for.
func (f *Fleet) newTemplatePools(reg prometheus.Registerer) error {
	for name, size := range f.cfg.Pool.Templates {
		if size == 0 {
			continue
		}
		prov, err := provider.Lookup(name)
		if err != nil {
			return fmt.Errorf("pool.templates: %w", err)
		}
		p, err := newPool(f, name, size, reg)
		if err != nil {
			return err
		}
		p.prepare = f.prepareTemplate(prov)
		if f.templates == nil {
			f.templates = map[string]*pool{}
		}
		f.templates[name] = p
	}
	return nil
}

// SetPoolServices sets what serves a template pool's sandbox while it is readied (the
// egress proxy, so that its dependencies can be fetched); stop ends it.
func (f *Fleet) SetPoolServices(serve func(sb *runner.Sandbox) (stop func())) {
	f.poolServe = serve
}

// prepareTemplate scaffolds prov's template in a started sandbox and resolves its
// dependencies, each command through the sandbox's agent, as the sandbox user.
func (f *Fleet) prepareTemplate(prov provider.RuntimeProvider) func(ctx context.Context, sb *runner.Sandbox) error {
	return func(ctx context.Context, sb *runner.Sandbox) error {
		if f.poolServe != nil {
			defer f.poolServe(sb)()
		}
		files, err := prov.Scaffold(templateProject)
		if err != nil {
			return err
		}
		for _, name := range slices.Sorted(maps.Keys(files)) {
			err := memberRun(ctx, sb, &pb.ExecuteRequest{
				Argv:  []string{"sh", "-c", `mkdir -p "$(dirname "$1")" && cat > "$1"`, "sh", path.Join(templateProject, name)},
				Stdin: files[name], TimeoutMs: uint64(time.Minute.Milliseconds()),
			})
			if err != nil {
				return fmt.Errorf("scaffold %s: %w", name, err)
			}
		}
		for _, c := range prov.Resolve(provider.Project{Runtime: prov.ID(), Dir: templateProject}) {
			timeout := c.Timeout
			if timeout == 0 {
				timeout = api.DefaultStepTimeout
			}
			err := memberRun(ctx, sb, &pb.ExecuteRequest{
				Argv: c.Argv, Env: append(slices.Clone(c.Env), f.cfg.Pool.Env...), Cwd: templateProject, Stdin: c.Stdin,
				TimeoutMs: uint64(timeout.Milliseconds()),
			})
			if err != nil {
				return fmt.Errorf("resolve (%s): %w", c.Name, err)
			}
		}
		return nil
	}
}

// memberRun runs req in sb to its end; a command that fails is an error quoting the end
// of its output.
func memberRun(ctx context.Context, sb *runner.Sandbox, req *pb.ExecuteRequest) error {
	req.AddEnv, req.MaxOutputBytes = true, memberOutput
	ctx, cancel := context.WithTimeout(ctx, time.Duration(req.TimeoutMs)*time.Millisecond+5*time.Second)
	defer cancel()
	res, err := sb.Agent().Execute(ctx, req)
	if err != nil {
		return err
	}
	if st := res.GetStatus(); st.GetExitCode() != 0 || st.GetError() != "" || st.GetSignal() != 0 {
		return fmt.Errorf("exit %d %s: %s: %w", st.GetExitCode(), st.GetError(),
			errdefs.Clip(strings.TrimSpace(string(res.Stderr)+"\n"+string(res.Stdout)), 1024), errdefs.ErrFailedPrecondition)
	}
	return nil
}

// Member is a template pool's sandbox taken for a new project: its files go to one
// project, once, and Done discards it.
type Member struct {
	p  *pool
	sb *runner.Sandbox
}

// TakeTemplate takes a ready sandbox from runtime's template pool, or returns nil (a
// miss, counted) when there is no such pool or it is empty.
func (f *Fleet) TakeTemplate(runtime string) *Member {
	p := f.templates[runtime]
	if p == nil {
		return nil
	}
	sb := p.take()
	if sb == nil {
		p.claims.WithLabelValues("miss").Inc()
		return nil
	}
	return &Member{p: p, sb: sb}
}

// ID is the member's sandbox's ID.
func (m *Member) ID() string { return m.sb.ID }

// Export writes the member's project as a tar stream to w, a chunk at a time, without
// the files named in exclude (relative to the project: the scaffold, which the new
// project writes with its own name).
func (m *Member) Export(ctx context.Context, exclude []string, w func([]byte) error) error {
	argv := []string{"tar", "--anchored"}
	for _, n := range exclude {
		argv = append(argv, "--exclude=./"+n)
	}
	argv = append(argv, "-cf", "-", ".")
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	events, err := m.sb.Agent().Start(ctx, &pb.StartRequest{Argv: argv, Cwd: templateProject, AddEnv: true})
	if err != nil {
		return fmt.Errorf("pool member %s: %w", m.sb.ID, err)
	}
	var stderr []byte
	for {
		ev, err := events.Recv()
		if err != nil {
			return fmt.Errorf("pool member %s: %w", m.sb.ID, err)
		}
		switch e := ev.Event.(type) {
		case *pb.ProcessEvent_Output:
			if e.Output.Stream == pb.Stream_STREAM_STDERR {
				stderr = append(stderr, e.Output.Data...)
				continue
			}
			if err := w(e.Output.Data); err != nil {
				return err
			}
		case *pb.ProcessEvent_Exited:
			if st := e.Exited; st.GetExitCode() != 0 || st.GetError() != "" || st.GetSignal() != 0 {
				return fmt.Errorf("pool member %s: tar: exit %d %s: %s: %w", m.sb.ID, st.GetExitCode(), st.GetError(),
					errdefs.Clip(strings.TrimSpace(string(stderr)), 1024), errdefs.ErrUnavailable)
			}
			return nil
		}
	}
}

// Done discards the member, and counts its claim a hit when its files were handed over.
func (m *Member) Done(hit bool) {
	result := "miss"
	if hit {
		result = "hit"
	}
	m.p.claims.WithLabelValues(result).Inc()
	go m.p.discard(m.sb, "its project was taken")
}

// HasTemplatePool reports whether runtime's template has a pool.
func (f *Fleet) HasTemplatePool(runtime string) bool { return f.templates[runtime] != nil }
