// Command cmd runs paddock's benchmarks and writes docs/benchmarks.md: `make bench` (as
// root; it builds bin/ first, which this command requires).
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"

	"github.com/paddockhq/paddock/internal/bench"
	"github.com/paddockhq/paddock/internal/store/pgtest"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	o := bench.DefaultOptions()
	bin := flag.String("bin", "bin", "directory holding paddock and paddock-agent (make build puts them in bin)")
	out := flag.String("out", "", "also write the report to this file (make bench: docs/benchmarks.md)")
	flag.IntVar(&o.N, "n", o.N, "samples per latency measurement")
	flag.IntVar(&o.Warmup, "warmup", o.Warmup, "discarded warm-up rounds before the samples")
	flag.IntVar(&o.StreamN, "stream-n", o.StreamN, "runs of the streaming benchmark")
	flag.Int64Var(&o.StreamBytes, "stream-bytes", o.StreamBytes, "bytes each streaming run moves")
	flag.IntVar(&o.Sandboxes, "sandboxes", o.Sandboxes, "idle sandboxes whose memory is read")
	flag.DurationVar(&o.Idle, "idle", o.Idle, "how long sandboxes idle before their memory is read")
	flag.IntVar(&o.ProxyClients, "proxy-clients", o.ProxyClients, "concurrent clients of the proxy's load rounds")
	flag.DurationVar(&o.ProxyRound, "proxy-round", o.ProxyRound, "how long each of the proxy's load rounds lasts")
	flag.IntVar(&o.ProxyRounds, "proxy-rounds", o.ProxyRounds, "rounds of each proxy variant (load and WebSocket echo)")
	flag.IntVar(&o.EchoN, "echo-n", o.EchoN, "WebSocket messages per echo round")
	flag.IntVar(&o.PromoteRounds, "promote-rounds", o.PromoteRounds, "rounds of promotion under load")
	flag.DurationVar(&o.PromoteFor, "promote-for", o.PromoteFor, "how long each promotion round lasts")
	flag.DurationVar(&o.PromoteEvery, "promote-every", o.PromoteEvery, "time between promotions")
	flag.IntVar(&o.EgressRounds, "egress-rounds", o.EgressRounds, "rounds of the egress proxy's downloads")
	flag.Int64Var(&o.EgressBytes, "egress-bytes", o.EgressBytes, "bytes each of the egress proxy's downloads moves")
	flag.IntVar(&o.ProviderRounds, "provider-rounds", o.ProviderRounds, "rounds of the providers table (scaffold, HMR, rebuild)")
	flag.StringVar(&o.Only, "only", "", "run only the benchmarks whose name contains this (e.g. proxy)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the harness's process (which hosts the proxy benchmarks' control plane) to this file")
	flag.Parse()
	if o.N < 1 || o.StreamN < 1 || o.Sandboxes < 1 || o.StreamBytes < 1 || o.ProxyClients < 1 || o.ProxyRounds < 1 ||
		o.EchoN < 1 || o.PromoteRounds < 1 || o.EgressRounds < 1 || o.EgressBytes < 1 || o.ProxyRound <= 0 || o.PromoteFor <= 0 || o.PromoteEvery <= 0 {
		return fmt.Errorf("-n, -stream-n, -sandboxes, -stream-bytes, -proxy-clients, -proxy-rounds, -echo-n, -promote-rounds, -egress-rounds and -egress-bytes must be at least 1, and durations positive")
	}
	o.Progress = os.Stderr

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	env, err := bench.NewEnv(*bin, log)
	if err != nil {
		return err
	}
	defer env.Close()
	defer pgtest.Stop() // the PostgreSQL server of the replicas' table, if it ran
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	report, err := bench.Run(ctx, env, o)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	report.WriteMarkdown(&buf)
	os.Stdout.Write(buf.Bytes())
	if *out != "" {
		return os.WriteFile(*out, buf.Bytes(), 0o644)
	}
	return nil
}
