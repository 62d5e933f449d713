package bench

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"
)

// recorder collects named series of samples; it drops what comes while it is off (warm-up).
type recorder struct {
	on     bool
	series map[string][]float64
}

func newRecorder() *recorder { return &recorder{series: map[string][]float64{}} }

func (r *recorder) add(name string, v float64) {
	if r.on {
		r.series[name] = append(r.series[name], v)
	}
}

func (r *recorder) summary(name string) Summary { return Summarize(r.series[name]) }

// interleave runs warmup unrecorded rounds, then n recorded ones, of every fn. Each round
// starts one further along the list (A B, B A, A B, …), so that a slow spell of a shared
// machine lands on every variant alike and no variant always runs right after another.
func interleave(rec *recorder, warmup, n int, fns ...func() error) error {
	for round := range warmup + n {
		rec.on = round >= warmup
		for i := range fns {
			if err := fns[(round+i)%len(fns)](); err != nil {
				return err
			}
		}
	}
	return nil
}

// Timing is one run of a command whose stdout is a pipe the harness drains: times are from
// just before fork.
type Timing struct {
	// Bytes is how much arrived on stdout.
	Bytes int64
	// First is when the first byte arrived, Last when stdout reached EOF, Exit when the
	// command had exited.
	First, Last, Exit time.Duration
	// CPU is the user and system time the command itself used (not its children).
	CPU time.Duration
}

// readBuf is what one read of a command's stdout asks for: more than a pipe holds, so a
// read never splits what the pipe has.
const readBuf = 1 << 20

// timeOutput starts cmd with stdout a pipe and stdin /dev/null, reads stdout to EOF, and
// waits for cmd. keep, if not nil, gets a copy of the output. A command that fails is an
// error that quotes its stderr.
func timeOutput(cmd *exec.Cmd, keep *bytes.Buffer) (Timing, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return Timing{}, err
	}
	defer r.Close()
	var stderr tailBuffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, w, &stderr
	start := time.Now()
	err = cmd.Start()
	w.Close()
	if err != nil {
		return Timing{}, err
	}
	var t Timing
	buf := make([]byte, readBuf)
	for {
		n, rerr := r.Read(buf)
		if n > 0 && t.Bytes == 0 {
			t.First = time.Since(start)
		}
		t.Bytes += int64(n)
		if keep != nil {
			keep.Write(buf[:n])
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			return t, rerr
		}
	}
	t.Last = time.Since(start)
	err = cmd.Wait()
	t.Exit = time.Since(start)
	if ps := cmd.ProcessState; ps != nil {
		t.CPU = ps.UserTime() + ps.SystemTime()
	}
	if err != nil {
		return t, fmt.Errorf("%s: %w: %s", strings.Join(cmd.Args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return t, nil
}

// tailBuffer keeps the last 4 KiB written to it: enough of a failing command's stderr to
// say why.
type tailBuffer struct{ b []byte }

func (t *tailBuffer) Write(p []byte) (int, error) {
	const max = 4 << 10
	t.b = append(t.b, p...)
	if len(t.b) > max {
		t.b = t.b[len(t.b)-max:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string { return string(t.b) }

// tail is the end of a log, enough to say why something failed.
func tail(s string) string {
	var t tailBuffer
	_, _ = t.Write([]byte(s))
	return strings.TrimSpace(t.String())
}
