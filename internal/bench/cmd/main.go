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
	"syscall"

	"github.com/paddockhq/paddock/internal/bench"
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
	flag.Parse()
	if o.N < 1 || o.StreamN < 1 || o.Sandboxes < 1 || o.StreamBytes < 1 {
		return fmt.Errorf("-n, -stream-n, -sandboxes and -stream-bytes must be at least 1")
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
