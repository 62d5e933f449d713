// Package bench measures paddock against the layer beneath it, so that its overhead is a
// figure rather than a guess: the CLI's create-to-first-byte against a bare `runc run` of
// the same bundle, an exec round trip through the agent against `runc exec` into the same
// container, output streaming through the agent against a plain host pipe, and the memory
// an idle sandbox holds.
//
// The machines it runs on are shared and noisy, so each pair is sampled interleaved in one
// run and compared by the ratio of its medians. internal/bench/cmd prints the tables and
// writes docs/benchmarks.md (`make bench`); the Go benchmarks in this package's tests time
// the same operations for `go test -bench`.
package bench

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"strings"
	"time"

	"github.com/paddockhq/paddock/internal/runner"
)

// Options say how much to measure.
type Options struct {
	// N is how many samples each latency takes, after Warmup discarded rounds.
	N, Warmup int
	// Quick shrinks what does not scale with N (the history benchmark's 500 MB workspace):
	// the harness's own test sets it.
	Quick bool
	// StreamN is how many times the streaming benchmark moves StreamBytes.
	StreamN     int
	StreamBytes int64
	// Sandboxes is how many idle sandboxes the memory benchmark reads, after Idle.
	Sandboxes int
	Idle      time.Duration
	// ProxyClients is how many concurrent keep-alive clients load the proxy; each load
	// round lasts ProxyRound, and every variant gets ProxyRounds rounds (the WebSocket echo
	// too, with EchoN messages of EchoBytes each).
	ProxyClients int
	ProxyRound   time.Duration
	ProxyRounds  int
	EchoN        int
	EchoBytes    int
	// PromoteRounds rounds of PromoteFor each promote the user every PromoteEvery under load.
	PromoteRounds            int
	PromoteFor, PromoteEvery time.Duration
	// EgressRounds rounds each download EgressBytes from inside a sandbox through the egress
	// proxy and directly, over HTTPS and plain HTTP.
	EgressRounds int
	EgressBytes  int64
	// ProviderRounds rounds each scaffold a Vite app, edit it by HMR and rebuild it, in a
	// sandbox and on the host (0: one round and no warm-up).
	ProviderRounds int
	// Only, when set, runs only the benchmarks whose name contains it.
	Only string
	// Progress, when set, gets a line as each benchmark starts.
	Progress io.Writer
}

// DefaultOptions are what `make bench` uses.
func DefaultOptions() Options {
	return Options{N: 30, Warmup: 2, StreamN: 5, StreamBytes: 1 << 30, Sandboxes: 5, Idle: time.Second,
		ProxyClients: 8, ProxyRound: 3 * time.Second, ProxyRounds: 5, EchoN: 2000, EchoBytes: 32,
		PromoteRounds: 2, PromoteFor: 5 * time.Second, PromoteEvery: 250 * time.Millisecond,
		EgressRounds: 15, EgressBytes: 256 << 20, ProviderRounds: 5}
}

// Run runs every benchmark in e.
func Run(ctx context.Context, e *Env, o Options) (*Report, error) {
	r := &Report{Date: time.Now().UTC(), Machine: e.DescribeMachine(), Options: o}
	start := time.Now()
	for _, b := range []struct {
		name string
		run  func(context.Context, Options) (*Table, error)
	}{
		{"create → first byte", e.FirstByteTable},
		{"exec round trip", e.ExecTable},
		{"streaming", e.StreamTable},
		{"idle memory", e.MemoryTable},
		{"proxy load", e.ProxyLoadTable},
		{"proxy websocket echo", e.ProxyEchoTable},
		{"promotion under load", e.PromoteTable},
		{"secrets broker", e.BrokerTable},
		{"provider gateway", func(ctx context.Context, o Options) (*Table, error) { return GatewayTTFBTable(ctx, o.N*10) }},
		{"workspace history", e.HistoryTable},
		{"microvm boot", e.MicroVMTable},
		{"execution kernel", e.KernelTable},
		{"egress download", e.EgressTable},
		{"go client", e.ClientTable},
		{"desktop", e.DesktopTable},
		{"warm pool", e.PoolTable},
		{"fork", e.ForkTable},
		{"wake", e.WakeTable},
		{"coding agent", e.AgentTable},
		{"providers", e.ProvidersTable},
		{"replicas", e.ReplicasTable},
		{"backup", e.BackupTable},
		{"kubernetes", e.KubeTable},
		{"kwok scale", e.KubeScaleTable},
	} {
		if o.Only != "" && !strings.Contains(b.name, o.Only) {
			continue
		}
		if o.Progress != nil {
			fmt.Fprintf(o.Progress, "bench: %s\n", b.name)
		}
		t, err := b.run(ctx, o)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", b.name, err)
		}
		r.Tables = append(r.Tables, t)
	}
	r.Elapsed = time.Since(start)
	return r, nil
}

// FirstByteTable compares `paddock run -- echo hi` with a bare `runc run` of its bundle,
// and splits paddock's time into its phases.
func (e *Env) FirstByteTable(ctx context.Context, o Options) (*Table, error) {
	rec := newRecorder()
	tmpfs := tmpfsDir()
	runsc, bwrap, podman := e.newRunscPeer(), newBwrapPeer(), e.startPodman(ctx)
	defer podman.Close()
	peerRun := func(p *peer, key string, run func(context.Context, *Env) (Timing, error)) func() error {
		return p.round(func() error {
			t, err := run(ctx, e)
			rec.add(key+".first", ms(t.First))
			rec.add(key+".exit", ms(t.Exit))
			return err
		})
	}
	err := interleave(rec, o.Warmup, o.N,
		func() error {
			t, err := e.PaddockRun(ctx)
			rec.add("paddock.first", ms(t.First))
			rec.add("paddock.exit", ms(t.Exit))
			return err
		},
		func() error {
			t, bundle, err := e.RuncRun(ctx)
			rec.add("runc.first", ms(t.First))
			rec.add("runc.exit", ms(t.Exit))
			rec.add("bundle", ms(bundle))
			return err
		},
		func() error {
			p, err := e.RunnerRun(ctx)
			rec.add("create", ms(p.Create))
			rec.add("attach.first", ms(p.FirstByte))
			rec.add("attach.exit", ms(p.Exited))
			rec.add("destroy", ms(p.Destroy))
			return err
		},
		func() error {
			t, err := e.PaddockVersion(ctx)
			rec.add("version", ms(t.Exit))
			return err
		},
		func() error {
			agent, tramp, floor, err := e.ProcessStarts(ctx)
			rec.add("start.agent", ms(agent.Exit))
			rec.add("start.exec", ms(tramp.Exit))
			rec.add("start.true", ms(floor.Exit))
			return err
		},
		func() error {
			d, err := e.RuncRemove(ctx, ForceDelete)
			rec.add("remove.force", ms(d))
			return err
		},
		func() error {
			d, err := e.RuncRemove(ctx, KillThenDelete)
			rec.add("remove.kill", ms(d))
			return err
		},
		func() error {
			if tmpfs == "" {
				return nil
			}
			d, err := e.WriteBundleIn(tmpfs)
			rec.add("bundle.tmpfs", ms(d))
			return err
		},
		peerRun(runsc.peer, "runsc", runsc.Run),
		peerRun(bwrap.peer, "bwrap", bwrap.Run),
		peerRun(podman.peer, "podman", podman.Run),
	)
	if err != nil {
		return nil, err
	}
	pf, rf := rec.summary("paddock.first"), rec.summary("runc.first")
	pe, re := rec.summary("paddock.exit"), rec.summary("runc.exit")
	t := &Table{
		Title: "1. Create → first byte of `echo hi` (container tier)",
		About: "`paddock run -- echo hi` (the CLI built from this checkout, default configuration) against a foreground " +
			"`runc run` of paddock's own bundle with `/bin/echo hi` as its process. Both are timed from fork to the first " +
			"byte on their stdout pipe, and to their exit. The *breakdown* rows split paddock's time: the same run done " +
			"in process through the runner (phase by phase), the cost of starting the CLI's process at all, writing a bundle, " +
			"and removing a running container as Sandbox.Destroy does; the *what if* rows time alternatives paddock does not " +
			"use today. The *peer* rows are what a user would pick instead, in the same rounds: " + firstBytePeersAbout(runsc, bwrap, podman) +
			" Their ratio column is the peer against `runc run`, then paddock's figure against the peer's. Every row takes one sample per round, all interleaved.",
		Rows: []Row{
			{Name: "`paddock run -- echo hi`: fork → first byte", Unit: "ms", Summary: pf, Ratio: ratio(pf.P50, rf.P50), Target: "≤ 1.5× runc run", Met: yesNo(pf.P50 <= 1.5*rf.P50)},
			{Name: "`runc run` of paddock's bundle: fork → first byte", Unit: "ms", Summary: rf, Ratio: "1.00× (baseline)"},
			{Name: "`paddock run -- echo hi`: fork → exit", Unit: "ms", Summary: pe, Ratio: ratio(pe.P50, re.P50)},
			{Name: "`runc run` of paddock's bundle: fork → exit", Unit: "ms", Summary: re, Ratio: "1.00× (baseline)"},
		},
	}
	for _, v := range []struct {
		p         *peer
		key, name string
	}{
		{runsc.peer, "runsc", "*peer:* `runsc run` (gVisor) of paddock's gVisor bundle"},
		{bwrap.peer, "bwrap", "*peer:* `bwrap` (bubblewrap, namespaces only) of the host's /usr"},
		{podman.peer, "podman", "*peer:* `podman run --rm` of paddock's rootfs imported as an image"},
	} {
		first, exit := rec.summary(v.key+".first"), rec.summary(v.key+".exit")
		firstRow := Row{Name: v.name + ": fork → first byte", Unit: "ms", Summary: first, Ratio: vsPeer(first.P50, rf.P50, "runc run", pf.P50)}
		if v.key == "podman" && v.p.missing == "" { // the target against the peer a user would pick
			firstRow.Target, firstRow.Met = "paddock ≤ 0.3× podman run", yesNo(pf.P50 <= 0.3*first.P50)
		}
		t.Rows = append(t.Rows,
			v.p.row(firstRow),
			v.p.row(Row{Name: v.name + ": fork → exit", Unit: "ms", Summary: exit, Ratio: vsPeer(exit.P50, re.P50, "runc run", pe.P50)}))
	}
	t.Rows = append(t.Rows, []Row{
		{Name: "*breakdown:* `paddock version`: fork → exit (CLI process start)", Unit: "ms", Summary: rec.summary("version")},
		{Name: "*breakdown:* runner.Create (in process)", Unit: "ms", Summary: rec.summary("create")},
		{Name: "*breakdown:* Create returned → first output via Attach", Unit: "ms", Summary: rec.summary("attach.first")},
		{Name: "*breakdown:* `paddock-agent` given no envelope: fork → exit (the agent's runtime and package initialisation, on the host)", Unit: "ms", Summary: rec.summary("start.agent")},
		{Name: "*breakdown:* `paddock-exec` (the main command's trampoline) given no arguments: fork → exit", Unit: "ms", Summary: rec.summary("start.exec")},
		{Name: "*for comparison:* `/bin/true`: fork → exit (the start of any process)", Unit: "ms", Summary: rec.summary("start.true")},
		{Name: "*breakdown:* Create returned → exit status via Attach", Unit: "ms", Summary: rec.summary("attach.exit")},
		{Name: "*breakdown:* Sandbox.Destroy", Unit: "ms", Summary: rec.summary("destroy")},
		{Name: "*for comparison:* container.WriteBundle on the harness's disk", Unit: "ms", Summary: rec.summary("bundle")},
	}...)
	if tmpfs != "" {
		t.Rows = append(t.Rows, Row{Name: "*breakdown:* container.WriteBundle into tmpfs (" + tmpfs + "), as Create writes it", Unit: "ms", Summary: rec.summary("bundle.tmpfs")})
	}
	force, kill := rec.summary("remove.force"), rec.summary("remove.kill")
	t.Rows = append(t.Rows,
		Row{Name: "*for comparison:* `runc delete --force` of a running container (how Destroy began before it used a pidfd)", Unit: "ms", Summary: force},
		Row{Name: "*what if:* kill the cgroup, then plain `runc delete`", Unit: "ms", Summary: kill, Ratio: ratio(kill.P50, force.P50)},
	)
	ver, create, first, destroy, bundle := rec.summary("version").P50, rec.summary("create").P50, rec.summary("attach.first").P50, rec.summary("destroy").P50, rec.summary("bundle").P50
	inCreate := bundle // the bundle as Create writes it: on tmpfs where the harness has one
	if tmpfs != "" {
		inCreate = rec.summary("bundle.tmpfs").P50
	}
	t.Notes = []string{
		fmt.Sprintf("At the median `paddock run` prints its first byte %.1f ms after fork, %.1f ms more than a bare `runc run` of the same bundle (%.1f ms): %s.",
			pf.P50, pf.P50-rf.P50, rf.P50, ratio(pf.P50, rf.P50)),
		fmt.Sprintf("Where paddock's time goes (medians of the breakdown rows): starting the CLI process %.1f ms; runner.Create %.1f ms, "+
			"of which writing the bundle and rootfs is about %.1f ms (the workspace's disk image is made and mounted meanwhile, and waited for before runc starts) and the rest mostly the detached `runc run` (which returns once the agent's process has been started); "+
			"then %.1f ms until the first output reaches the client (the agent's own start, the main command's start, Attach). "+
			"These add up to %.1f ms against the %.1f ms measured end to end%s. Of the time after Create, starting the agent's binary "+
			"alone takes %.1f ms on the host and the trampoline's %.1f ms, against %.1f ms for /bin/true: a bare `runc run` starts only its command.",
			ver, create, inCreate, first, ver+create+first, pf.P50, remainder(pf.P50-(ver+create+first)),
			rec.summary("start.agent").P50, rec.summary("start.exec").P50, rec.summary("start.true").P50),
		fmt.Sprintf("After the first byte, `paddock run` needs %.1f ms more to exit; Sandbox.Destroy takes %.1f ms: it sends SIGKILL to the "+
			"container's first process through a pidfd, waits for it to exit, and runs a plain `runc delete`. `runc delete --force` alone "+
			"takes %.1f ms, because it sleeps a fixed 100 ms after its kill (runc's delete.go, killContainer). Killing the cgroup first "+
			"and then deleting without --force takes %.1f ms, but on cgroup v1 cgroups.Group.Kill freezes the group first, and a process "+
			"caught inside execve of a multithreaded program (runc init becoming the agent) cannot freeze, so that kill can wait out the "+
			"freezer's 1 s timeout. A foreground `runc run` exits %.1f ms after its first byte.",
			pe.P50-pf.P50, destroy, force.P50, kill.P50, re.P50-rf.P50),
	}
	var vs []string
	for _, v := range []struct {
		p         *peer
		key, name string
	}{{runsc.peer, "runsc", "`runsc run`"}, {bwrap.peer, "bwrap", "`bwrap`"}, {podman.peer, "podman", "`podman run --rm`"}} {
		if v.p.missing == "" {
			f, x := rec.summary(v.key+".first").P50, rec.summary(v.key+".exit").P50
			vs = append(vs, fmt.Sprintf("%s %.1f ms to first byte and %.1f ms to exit (paddock %s and %s of it)", v.name, f, x, ratio(pf.P50, f), ratio(pe.P50, x)))
		} else {
			vs = append(vs, fmt.Sprintf("%s not measured (%s)", v.name, v.p.missing))
		}
	}
	t.Notes = append(t.Notes, "Against the peers, in the same rounds, at the median: "+strings.Join(vs, "; ")+".")
	if stateDir := runner.DefaultConfig().StateDir; tmpfs != "" {
		t.Notes = append(t.Notes, fmt.Sprintf("Writing the bundle (about 50 directories, files and symlinks of the rootfs, and config.json) is "+
			"file-system metadata work: %.1f ms on the harness's disk (%s), %.1f ms on tmpfs. Where the state_dir is not on tmpfs (the CLI's "+
			"default, %s, is %s here), each sandbox's bundle gets a tmpfs of its own, mounted before it is written and unmounted when the "+
			"sandbox is removed, so Create pays the tmpfs figure and a mount. A sandbox's disk image is a copy of an empty ext4 made once "+
			"per size, mounted through loop ioctls (no mkfs.ext4, losetup or mount process at each start); a one-shot sandbox's has no "+
			"journal to load, and is made and mounted while the bundle is written.",
			bundle, fsName(e.Dir), rec.summary("bundle.tmpfs").P50, stateDir, fsName(stateDir)))
	}
	return t, nil
}

// ExecTable compares an Execute round trip through the agent with `runc exec` into the
// same container.
func (e *Env) ExecTable(ctx context.Context, o Options) (t *Table, err error) {
	s, err := e.StartExecSandbox(ctx)
	if err != nil {
		return nil, err
	}
	defer func() {
		if derr := s.Destroy(context.WithoutCancel(ctx)); derr != nil && err == nil {
			err = derr
		}
	}()
	rec := newRecorder()
	// The agent's channel and runc's binary are warmed by rounds that are not recorded.
	err = interleave(rec, o.Warmup+3, o.N,
		func() error {
			d, err := s.AgentExec(ctx)
			rec.add("agent", ms(d))
			return err
		},
		func() error {
			d, err := s.RuncExec(ctx)
			rec.add("runc", ms(d))
			return err
		},
	)
	if err != nil {
		return nil, err
	}
	a, r := rec.summary("agent"), rec.summary("runc")
	return &Table{
		Title: "2. Exec round trip of `true` in a running sandbox",
		About: "One sandbox created with runner.Create (main command `sleep 3600`). The agent's figure is one " +
			"`Process.Execute{argv: [true]}` call on the sandbox's channel, from the call to its response; the baseline is " +
			"`runc --root <state>/runc exec <id> true` into the same container, from fork to exit. Interleaved, after warm-up calls.",
		Rows: []Row{
			execTarget.row(Row{Name: "agent `Execute(true)`", Unit: "ms", Summary: a}, r.P50, ""),
			{Name: "`runc exec <id> true`", Unit: "ms", Summary: r, Ratio: "1.00× (baseline)"},
		},
		Notes: []string{
			fmt.Sprintf("The agent's round trip is %.2f ms at the median against %.1f ms for `runc exec` (%s): the agent is already inside the "+
				"namespaces, cgroup and seccomp filter, so an exec is one RPC, a fork and exec of `true`, and a wait; `runc exec` starts runc, "+
				"which re-executes itself as `runc init`, joins the container's namespaces and cgroups, loads the seccomp filter and then execs.",
				a.P50, r.P50, ratio(a.P50, r.P50)),
			fmt.Sprintf("The target is a ratio to `runc exec` of the same run (%s: %s); the absolute figure, %.2f ms, is information: "+
				"it follows the machine's load, and the ratio does not.", execTarget, execTarget.word(a.P50, r.P50, ""), a.P50),
		},
	}, nil
}

// execTarget is table 2's: an exec through the agent against `runc exec` into the same container.
var execTarget = atMost(0.25, "runc exec")

// StreamTable measures bulk stdout from a sandbox to the CLI against a host pipe.
func (e *Env) StreamTable(ctx context.Context, o Options) (*Table, error) {
	rec := newRecorder()
	podman := e.startPodman(ctx)
	defer podman.Close()
	err := interleave(rec, 0, o.StreamN,
		func() error {
			t, err := e.PaddockStream(ctx, o.StreamBytes)
			rec.add("paddock.stream", mbps(t.Bytes, t.Last-t.First))
			rec.add("paddock.total", mbps(t.Bytes, t.Exit))
			rec.add("paddock.seconds", t.Exit.Seconds())
			rec.add("paddock.cpu", ms(t.CPU))
			rec.add("paddock.cpushare", float64(t.CPU)/float64(t.Exit))
			return err
		},
		func() error {
			t, cpu, err := e.RunnerStream(ctx, o.StreamBytes)
			rec.add("runner.stream", mbps(t.Bytes, t.Last-t.First))
			rec.add("agent.cpu", ms(cpu))
			return err
		},
		func() error {
			t, err := e.HostStream(ctx, o.StreamBytes)
			rec.add("host", mbps(t.Bytes, t.Last-t.First))
			return err
		},
		func() error {
			t, err := e.RelayStream(ctx, o.StreamBytes)
			rec.add("relay", mbps(t.Bytes, t.Last-t.First))
			return err
		},
		podman.round(func() error {
			t, err := podman.Stream(ctx, e, o.StreamBytes)
			rec.add("podman", mbps(t.Bytes, t.Last-t.First))
			rec.add("podman.total", mbps(t.Bytes, t.Exit))
			return err
		}),
	)
	if err != nil {
		return nil, err
	}
	s, total, h := rec.summary("paddock.stream"), rec.summary("paddock.total"), rec.summary("host")
	relay, pod, podTotal := rec.summary("relay"), rec.summary("podman"), rec.summary("podman.total")
	name := fmt.Sprintf("`head -c %d /dev/zero`", o.StreamBytes)
	return &Table{
		Title: fmt.Sprintf("3. Streaming %s of stdout through the agent", sizeName(o.StreamBytes)),
		About: fmt.Sprintf("`paddock run -- head -c %d /dev/zero` with its stdout a pipe the harness drains (1 MiB reads) and counts; every run "+
			"must deliver exactly %d bytes. Rates are in MB/s (10^6 bytes per second): from the first byte to EOF (the stream itself), "+
			"and from fork to exit (with the sandbox's creation and removal). The reference is the same `head` on the host writing "+
			"into the same kind of pipe; the *floor* is the same `head` relayed by two `cat` processes through pipes "+
			"(`head | cat | cat`), what any design pays that carries a sandbox's output through a process inside and a client outside. "+
			"The *peer* is `podman run --rm` of paddock's rootfs (as table 1 runs it) with the same `head`, its output relayed by conmon and podman's attach. "+
			"Ratios are against the floor; the peer's column gives the peer against the floor, then paddock's figure against the peer's. Interleaved.", o.StreamBytes, o.StreamBytes),
		Rows: []Row{
			streamTarget.row(Row{Name: "`paddock run -- " + name[1:] + ": first byte → EOF", Unit: "MB/s", Summary: s}, relay.P50, ""),
			streamTarget.row(Row{Name: "`paddock run -- " + name[1:] + ": fork → exit", Unit: "MB/s", Summary: total}, relay.P50, ""),
			{Name: "*floor:* " + name + " `| cat | cat` on the host: first byte → EOF", Unit: "MB/s", Summary: relay, Ratio: "1.00× (floor)"},
			podman.row(Row{Name: "*peer:* `podman run --rm` of " + name + ": first byte → EOF", Unit: "MB/s", Summary: pod, Ratio: vsPeer(pod.P50, relay.P50, "the floor", s.P50)}),
			podman.row(Row{Name: "*peer:* `podman run --rm` of " + name + ": fork → exit", Unit: "MB/s", Summary: podTotal, Ratio: vsPeer(podTotal.P50, relay.P50, "the floor", total.P50)}),
			{Name: name + " on the host: first byte → EOF", Unit: "MB/s", Summary: h, Ratio: ratio(h.P50, relay.P50) + " (one pipe, the ceiling)"},
			{Name: "*breakdown:* the same through the runner in process (no CLI stdout): first byte → exit status", Unit: "MB/s", Summary: rec.summary("runner.stream"), Ratio: ratio(rec.summary("runner.stream").P50, h.P50)},
			{Name: "*breakdown:* CPU time (user + system) of the `paddock` CLI process per run", Unit: "ms", Summary: rec.summary("paddock.cpu")},
			{Name: "*breakdown:* CPU time of the agent per in-process run", Unit: "ms", Summary: rec.summary("agent.cpu")},
		},
		Notes: []string{
			fmt.Sprintf("A run moving %s through paddock takes %.2f s at the median. The path is: `head` → pipe → agent (read, kept in the "+
				"session's bounded output log) → gRPC stream over the Unix socket → CLI → its stdout pipe → harness; the host reference "+
				"crosses one pipe. The CLI process alone keeps %.0f%% of a CPU busy over the whole run (its CPU time over its wall time, median); "+
				"the agent uses %.0f ms of CPU per run on the other side; and this host has %d CPUs for `head`, the agent, the CLI and the reader. "+
				"When the figures are this far below the ceiling, the stream is bound by CPU spent moving bytes, not by waiting.",
				sizeName(o.StreamBytes), rec.summary("paddock.seconds").P50, 100*rec.summary("paddock.cpushare").P50, rec.summary("agent.cpu").P50, runtime.NumCPU()),
			fmt.Sprintf("The target is a ratio to the floor of the same run (%s: %s); the absolute rates (%.0f MB/s through paddock, %.0f MB/s through "+
				"the floor) are information: they follow the machine's load. %s", streamTarget, streamTarget.word(s.P50, relay.P50, ""), s.P50, relay.P50, podmanStreamNote(podman, pod, s)),
		},
	}, nil
}

// streamTarget is table 3's: the stream through paddock against two relays through pipes.
var streamTarget = atLeast(0.5, "the floor")

func podmanStreamNote(p *podmanPeer, pod, paddock Summary) string {
	if p.missing != "" {
		return "`podman run` was not measured (" + p.missing + ")."
	}
	return fmt.Sprintf("`podman run --rm` streams %.0f MB/s: paddock %s of it.", pod.P50, ratio(paddock.P50, pod.P50))
}

// remainder explains the difference between the CLI's end-to-end time and the sum of the
// phases measured apart.
func remainder(ms float64) string {
	if ms >= 0 {
		return fmt.Sprintf("; the remaining %.1f ms are the CLI's own work between its start and runner.Create (configuration, flags, the runc version check cache) and noise", ms)
	}
	return fmt.Sprintf(": the parts, medians of separate samples taken in another process, overshoot by %.1f ms, so take the split as approximate", -ms)
}

func sizeName(n int64) string {
	switch {
	case n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d bytes", n)
}

// MemoryTable reads what idle sandboxes hold.
func (e *Env) MemoryTable(ctx context.Context, o Options) (*Table, error) {
	mem, err := e.IdleSandboxes(ctx, o.Sandboxes, o.Idle)
	if err != nil {
		return nil, err
	}
	podman := e.startPodman(ctx)
	defer podman.Close()
	var pmem []podmanIdle
	if podman.missing == "" {
		pmem, err = podman.Idle(ctx, e, o.Sandboxes, o.Idle)
		podman.fail(err)
	}
	podSeries := func(f func(podmanIdle) int64) Summary {
		var xs []float64
		for _, m := range pmem {
			xs = append(xs, mib(f(m)))
		}
		return Summarize(xs)
	}
	prss, panon := podSeries(func(m podmanIdle) int64 { return m.RSS }), podSeries(func(m podmanIdle) int64 { return m.Anon })
	series := func(f func(IdleMemory) int64) Summary {
		var xs []float64
		for _, m := range mem {
			xs = append(xs, mib(f(m)))
		}
		return Summarize(xs)
	}
	rss := series(func(m IdleMemory) int64 { return m.AgentRSS })
	anon := series(func(m IdleMemory) int64 { return m.AgentAnon })
	file := series(func(m IdleMemory) int64 { return m.AgentFile })
	cg := series(func(m IdleMemory) int64 { return m.Cgroup })
	cgAnon := series(func(m IdleMemory) int64 { return m.CgroupAnon })
	cgFile := series(func(m IdleMemory) int64 { return m.CgroupFile })
	return &Table{
		Title: "4. Memory of one idle sandbox",
		About: fmt.Sprintf("%d sandboxes created through the runner with no main command, each asked for its agent's Info once and then "+
			"left idle for %s. The agent is the one process in the sandbox's cgroup; its VmRSS (and the RssAnon/RssFile split) comes "+
			"from /proc/<pid>/status, the cgroup's charge from memory.usage_in_bytes (v1) or memory.current (v2) and its split from "+
			"memory.stat. In MiB. The *peer* is podman: as many containers of paddock's rootfs (as table 1 runs it) started with "+
			"`podman run -d … sleep infinity` and left idle as long; what each holds on the host is its conmon (podman's per-container "+
			"monitor, outside the container, the counterpart of paddock's agent) and its one process, both VmRSS (and RssAnon) from "+
			"/proc/<pid>/status, summed. A paddock sandbox holds nothing on the host but its agent.", o.Sandboxes, o.Idle),
		Rows: []Row{
			memoryTarget.row(Row{Name: "agent VmRSS", Unit: "MiB", Summary: rss}, prss.P50, podman.missing),
			{Name: "agent RssAnon (heap, stacks)", Unit: "MiB", Summary: anon, Ratio: peerRatio(podman.peer, anon.P50, panon.P50)},
			podman.row(Row{Name: "*peer:* podman's idle container: conmon + its process, VmRSS", Unit: "MiB", Summary: prss, Ratio: "1.00× (peer)"}),
			podman.row(Row{Name: "*peer:* podman's idle container: conmon + its process, RssAnon", Unit: "MiB", Summary: panon, Ratio: "1.00× (peer)"}),
			{Name: "agent RssFile (mapped binary)", Unit: "MiB", Summary: file},
			{Name: "sandbox cgroup charge", Unit: "MiB", Summary: cg},
			{Name: "sandbox cgroup: anonymous (rss)", Unit: "MiB", Summary: cgAnon},
			{Name: "sandbox cgroup: page cache", Unit: "MiB", Summary: cgFile},
		},
		Notes: []string{
			fmt.Sprintf("Of the agent's %.1f MiB resident at the median, %.1f MiB are its own (anonymous) pages and %.1f MiB pages of its "+
				"static binary mapped from the page cache, which every sandbox on the host shares.", rss.P50, anon.P50, file.P50),
			"The cgroup's charge counts page cache only in the cgroup that first read a page (the kernel charges a cached page once), " +
				"so files the host had already cached, such as the agent's binary after the first sandbox, are not charged to later sandboxes.",
			memoryNote(podman, rss, anon, prss, panon),
		},
	}, nil
}

// peerRatio is v's ratio to a peer's figure, "" where the peer was not measured.
func peerRatio(p *peer, v, peerV float64) string {
	if p.missing != "" {
		return ""
	}
	return ratio(v, peerV)
}

// memoryTarget is table 4's: an idle sandbox's agent against podman's idle container.
var memoryTarget = atMost(4.5, "podman")

func memoryNote(p *podmanPeer, rss, anon, prss, panon Summary) string {
	if p.missing != "" {
		return "The target is a ratio to podman's idle container, which was not measured here (" + p.missing + "), so it is not judged."
	}
	return fmt.Sprintf("The target is a ratio to podman's idle container in the same run (%s, VmRSS): %.1f MiB against %.1f MiB (%s); RssAnon %.1f MiB "+
		"against %.1f MiB (%s, information). conmon is a small C program; the agent is a Go program that serves the sandbox's channel (exec, files, "+
		"history, sessions), so it holds the Go runtime's heap and the pages of its binary that it touched. The absolute figures are information.",
		memoryTarget, rss.P50, prss.P50, memoryTarget.word(rss.P50, prss.P50, ""), anon.P50, panon.P50, ratio(anon.P50, panon.P50))
}
