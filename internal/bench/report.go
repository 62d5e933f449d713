package bench

import (
	"fmt"
	"io"
	"time"
)

// Table is one benchmark's figures.
type Table struct {
	Title string
	// About says what is measured and how.
	About string
	Rows  []Row
	// Notes say what the figures show; they are computed from them.
	Notes []string
}

// Row is one measurement.
type Row struct {
	Name string
	// Unit is "ms", "MB/s", "MiB/s", "req/s", "MiB" or "count".
	Unit string
	Summary
	// Ratio compares the row's median with its baseline's ("" for none).
	Ratio string
	// Target is what the row should meet, and Met whether it does ("" for no target).
	Target, Met string
	// Missing, when set, says why the row has no figures (a peer that is not installed, or
	// could not run here).
	Missing string
}

// Report is a whole run of the benchmarks.
type Report struct {
	Date    time.Time
	Machine Machine
	Options Options
	Tables  []*Table
	Elapsed time.Duration
}

// ratio formats a/b.
func ratio(a, b float64) string {
	if b == 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f×", a/b)
}

func yesNo(ok bool) string {
	if ok {
		return "yes"
	}
	return "**no**"
}

func format(v float64, unit string) string {
	switch {
	case unit == "MB/s" || unit == "MiB/s" || unit == "req/s":
		return fmt.Sprintf("%.0f %s", v, unit)
	case unit == "count":
		return fmt.Sprintf("%.0f", v)
	case v < 10:
		return fmt.Sprintf("%.2f %s", v, unit)
	}
	return fmt.Sprintf("%.1f %s", v, unit)
}

// WriteMarkdown writes the table in Markdown.
func (t *Table) WriteMarkdown(w io.Writer) {
	fmt.Fprintf(w, "## %s\n\n", t.Title)
	if t.About != "" {
		fmt.Fprintf(w, "%s\n\n", t.About)
	}
	fmt.Fprintln(w, "| measurement | n | p50 | p90 | min | ratio (p50) | target | met |")
	fmt.Fprintln(w, "|---|--:|--:|--:|--:|--:|---|---|")
	for _, r := range t.Rows {
		if r.Missing != "" {
			fmt.Fprintf(w, "| %s | 0 | not measured: %s | — | — | — | %s | — |\n", r.Name, r.Missing, r.Target)
			continue
		}
		fmt.Fprintf(w, "| %s | %d | %s | %s | %s | %s | %s | %s |\n", r.Name, r.N,
			format(r.P50, r.Unit), format(r.P90, r.Unit), format(r.Min, r.Unit), r.Ratio, r.Target, r.Met)
	}
	fmt.Fprintln(w)
	for _, n := range t.Notes {
		fmt.Fprintf(w, "- %s\n", n)
	}
	if len(t.Notes) > 0 {
		fmt.Fprintln(w)
	}
}

// WriteMarkdown writes the report as docs/benchmarks.md has it.
func (r *Report) WriteMarkdown(w io.Writer) {
	m := r.Machine
	fmt.Fprintf(w, "# paddock benchmarks\n\n")
	fmt.Fprintf(w, "Measured %s by `internal/bench/cmd`; the whole run took %s. Reproduce with:\n\n", r.Date.Format("2006-01-02 15:04 MST"), r.Elapsed.Round(time.Second))
	fmt.Fprintf(w, "```sh\nmake bench   # as root; runs make build, then go run ./internal/bench/cmd -out docs/benchmarks.md\n```\n\n")
	fmt.Fprintf(w, "Machine: %s; %s cores; %s memory; kernel %s; %s; %s; harness built with %s; %s.\n\n",
		m.CPU, m.Cores, m.Memory, m.Kernel, m.Cgroups, m.Runc, m.Go, m.Paddock)
	o := r.Options
	fmt.Fprintf(w, "Every latency is taken %d times after %d discarded warm-up round(s); the streaming benchmark moves %d bytes %d times; "+
		"memory is read from %d sandboxes after %s idle. Pairs are sampled interleaved in the same run (A B, B A, …), "+
		"and compared by the ratio of their medians (p50), because this machine is shared and its absolute figures drift "+
		"from run to run. p90 and min are over the same samples; for a rate, min is the slowest run.\n\n",
		o.N, o.Warmup, o.StreamBytes, o.StreamN, o.Sandboxes, o.Idle)
	fmt.Fprintf(w, "The proxy's benchmarks (tables 5-7) run %d concurrent clients in rounds of %s, %d rounds of each variant; "+
		"the WebSocket echo sends %d messages of %d bytes per round; promotions run %d rounds of %s, one every %s.\n\n",
		o.ProxyClients, o.ProxyRound, o.ProxyRounds, o.EchoN, o.EchoBytes, o.PromoteRounds, o.PromoteFor, o.PromoteEvery)
	fmt.Fprintf(w, "%s\n\n", peersParagraph)
	for _, t := range r.Tables {
		t.WriteMarkdown(w)
	}
	fmt.Fprint(w, methodNotes)
}

// peersParagraph introduces the peers' rows of tables 1, 5, 6 and 13, and table 8's floor.
const peersParagraph = "**Peers.** Tables 1, 5, 6 and 13 also measure, in the same interleaved rounds as paddock and with the same client, what a user would " +
	"pick instead: `runsc run` (gVisor), `bwrap` (bubblewrap: the floor of a sandbox made of namespaces alone) and `podman run --rm` " +
	"beside `runc run` (table 1); nginx and haproxy as reverse proxies in front of the same app (table 5), and nginx's WebSocket proxying " +
	"(table 6); squid and tinyproxy as forward proxies for the same download, plain HTTP and CONNECT (table 13). Each is Debian's build, " +
	"installed at a pinned version by `scripts/setup.sh` (runsc is paddock's own build); the bench writes each one's configuration (each table " +
	"says what it is), starts it on loopback and stops it when the table is done. A peer's ratio column gives the peer against the floor, then " +
	"paddock's figure against the peer's; a peer that is not installed or cannot run here keeps its rows, which say why. Table 8 measures the " +
	"broker against its storage floor instead: the same durable writes alone. Every target is a ratio to a peer or a floor measured in the " +
	"same run (table 5: nginx's; table 13: the best forward peer's; table 8: the storage floor's; tables 2-4, 9, 11, 12, 15 and 18: see \"Notes on method\"), " +
	"and the absolute figures are information, since they follow the machine's load. To run only these tables: `make build`, then, as root, " +
	"`go run ./internal/bench/cmd -only \"create\"` (or `-only proxy`, `-only \"secrets broker\"`, `-only egress`)."

const methodNotes = `## Notes on method

- Time is taken with Go's monotonic clock in the harness: from just before fork (exec.Cmd.Start) to the
  first byte read from the command's stdout pipe, to EOF, and to the return of Wait. The harness's own
  read and scheduling latency (microseconds) is in every figure alike.
- The CLI runs with its default configuration (/var/lib/paddock, /run/paddock) exactly as a user would
  run it; the in-process rows and the exec and memory benchmarks use a runner configured the same way but
  with its data and state under a temporary directory. Here /run and /tmp are on the same disk (no tmpfs).
- The runc baseline runs the bundle paddock itself would run (container.WriteBundle: same mounts,
  namespaces, seccomp profile, cgroup limits, user) with ` + "`/bin/echo hi`" + ` in place of the agent,
  in the foreground, with the same runc binary. Its bundle is written before the clock starts; paddock
  writes its bundle inside its own figure (the "WriteBundle" row shows what that costs).
- The proxy's and the broker's benchmarks (tables 5-8) build the control plane as ` + "`paddock serve`" + ` does (server.New with
  its default configuration, data and state under a temporary directory, logging at warn) and serve it on
  loopback from the harness's own process; load comes from goroutines of the same process, through one
  net/http client with keep-alive (the broker's load comes from inside the user's live sandbox). The user's
  sandboxes are container sandboxes running the default app. Table 9 runs the provider gateway alone, in the
  harness's process, against a fake provider on loopback (it needs no sandbox).
- The machine is a shared virtual machine: expect a few milliseconds of jitter and occasional slow
  outliers (see p90 against p50). Ratios measured in one interleaved run are the figures to compare.
- Every target is a ratio to a peer (what a user would pick instead) or a floor (the least the same
  work costs here) measured interleaved in the same run; milliseconds, MB/s, MiB and kB are
  information. A machine of the same kind that ran about 3× slower one day failed every absolute
  target while the ratios held: a peer or floor measured in the same rounds slows down with paddock,
  a fixed number does not. The references: table 2, ` + "`runc exec`" + ` into the same container; table 3,
  the same bytes relayed by two processes through pipes (` + "`head | cat | cat`" + `), with ` + "`podman run`" + ` as a
  peer; table 4, podman's idle container (conmon and its process); table 9, Go's bare
  ` + "`httputil.ReverseProxy`" + ` in front of the same provider; table 11, a bare QEMU boot of the same kernel to its
  init's first line; table 12, parsing the same command line, the same path rules written by hand,
  and the token's HMAC chain alone; table 15, the same bundle from a plain Go file server, and the agent
  of a sandbox that never served the desktop; table 18's thaw, the same request to the sandbox
  running. Each bound was set where the old absolute target stood against its reference on this
  machine, or tighter where that was far looser than the reference allows. A target whose reference
  could not be measured here says so (—) instead of being judged.
`
