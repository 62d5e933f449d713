package containment

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/cgroups"
	"github.com/paddockhq/paddock/internal/runner"
	"github.com/paddockhq/paddock/internal/wire"
	pb "github.com/paddockhq/paddock/internal/wire/agentv1"
)

// forkBomb is the classic, in POSIX sh.
const forkBomb = "b() { b | b & }; b"

// TestForkBomb: a fork bomb under --pids 64 fills the sandbox's pids cgroup to its limit
// and no further, the host can still start processes meanwhile, and destroying the sandbox
// leaves nothing of it behind. (The runner sets the cgroup's limit to what was asked plus a
// reserve for the agent's own threads; the reserve is bounded here too.)
func TestForkBomb(t *testing.T) {
	h := newHarness(t)
	b := h.newBox(t, boxOpts{limits: wire.Limits{Memory: 256 << 20, Pids: 64}})
	if err := agentAnswers(b); err != nil { // the agent is up, not still runc's init
		t.Fatal(err)
	}
	hostUID, _ := b.sb.HostUser()
	live := h.traces(b.sb.ID, hostUID)
	t.Logf("a live sandbox on the host: %v", live)
	// Under runsc the host sees gVisor's processes (named exe), not the agent.
	agentSeen := "paddock-agent"
	if underRunsc() {
		agentSeen = "(exe, in cgroup /paddock/" + b.sb.ID
	}
	wants := []string{"/sandboxes/" + b.sb.ID, "/" + *ociRuntime + "/" + b.sb.ID, agentSeen, "/sys/fs/cgroup/paddock/" + b.sb.ID}
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err != nil { // v1
		wants = append(wants[:3], "/sys/fs/cgroup/memory/paddock/"+b.sb.ID, "/sys/fs/cgroup/pids/paddock/"+b.sb.ID)
	}
	for _, want := range wants {
		if !strings.Contains(strings.Join(live, "\n"), want) {
			t.Errorf("CONTROL FAILED: a live sandbox should show %q on the host, or its absence after destroy proves nothing: %v", want, live)
		}
	}
	pids := pidsCgroupDir(t, b.sb.Cgroup())
	limit, err := strconv.Atoi(readTrim(t, filepath.Join(pids, "pids.max")))
	floor := 64
	if underRunsc() {
		// The host's limit is a backstop above what gVisor's tasks can make the Sentry use
		// (container.sentryPids: 2n+512); the 64 are counted inside, by RLIMIT_NPROC.
		floor = 2*64 + 512
	}
	if err != nil || limit < floor || limit > floor+64 {
		t.Fatalf("pids.max of a --pids 64 sandbox is %d (%v); want %d plus at most 64 for the agent", limit, err, floor)
	}
	t.Logf("--pids 64 gives pids.max %d", limit)
	if underRunsc() {
		forkBombInGVisor(t, b, pids, limit)
		return
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := b.pc.Start(ctx, &pb.StartRequest{Argv: []string{"sh", "-c", forkBomb}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatalf("start the fork bomb: %v", err)
	}
	cancel() // the session goes on without a caller

	// The bomb hits the limit (so it was a bomb: the kernel counts refused forks in
	// pids.events), and the sandbox never holds more tasks than the limit.
	var peak, refused int
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline) && refused == 0; time.Sleep(10 * time.Millisecond) {
		n, err := strconv.Atoi(readTrim(t, filepath.Join(pids, "pids.current")))
		if err != nil {
			t.Fatal(err)
		}
		peak, refused = max(peak, n), pidsRefused(t, pids, peak >= limit)
		if cmds := filepath.Join(pids, cgroups.Commands); refused == 0 && exists(cmds) {
			// The commands' own limit (the 64 asked for) is met first, and counted there.
			refused = pidsRefused(t, cmds, false)
		}
	}
	t.Logf("fork bomb: peak %d tasks seen, %d forks refused at the limit", peak, refused)
	if refused == 0 {
		t.Errorf("CONTROL FAILED: the fork bomb never hit the pids limit of %d (peak seen %d); the test did not bomb", limit, peak)
	}
	if peak > limit {
		t.Errorf("ESCAPE: the sandbox ran %d tasks, over its pids limit of %d", peak, limit)
	}

	// The host is fine.
	hostCtx, hostCancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer hostCancel()
	if err := exec.CommandContext(hostCtx, "/bin/true").Run(); err != nil {
		t.Errorf("the host cannot start a process while the sandbox bombs: %v", err)
	}

	start := time.Now()
	b.destroy(t) // fails the test if anything is left
	t.Logf("destroyed the bombing sandbox in %s", time.Since(start))
}

// forkBombInGVisor is TestForkBomb's bomb under runsc, where the sandbox's 64 tasks are
// counted by gVisor's kernel (RLIMIT_NPROC) and a fork past them fails inside, so the host's
// pids.events never counts a refusal: the bomb's shell says so instead ("Cannot fork").
// The host's cgroup must stay under its own limit meanwhile (the Sentry would die past
// it), and the agent must answer after.
func forkBombInGVisor(t *testing.T, b *box, pids string, limit int) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	peak := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			if n, err := strconv.Atoi(readTrim(t, filepath.Join(pids, "pids.current"))); err == nil {
				peak = max(peak, n)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	resp, err := b.pc.Execute(ctx, &pb.ExecuteRequest{Argv: []string{"sh", "-c", "(" + forkBomb + ") 2>&1 | head -c 4096 & sleep 4"}, TimeoutMs: 8000})
	cancel()
	<-done
	if err != nil {
		t.Fatalf("run the fork bomb: %v", err)
	}
	t.Logf("fork bomb: peak %d host tasks (limit %d); the bomb said %.200q", peak, limit, resp.GetStdout())
	if !strings.Contains(string(resp.GetStdout()), "Cannot fork") {
		t.Errorf("CONTROL FAILED: the fork bomb never failed to fork, so it never met its limit: %q", resp.GetStdout())
	}
	if peak > limit {
		t.Errorf("ESCAPE: the sandbox's processes held %d host tasks, over its pids limit of %d", peak, limit)
	}
	if err := agentAnswers(b); err != nil {
		t.Errorf("the agent does not answer after the fork bomb: %v", err)
	}
	start := time.Now()
	b.destroy(t) // fails the test if anything is left
	t.Logf("destroyed the bombing sandbox in %s", time.Since(start))
}

// TestForkBombRun: the same bomb through `paddock run`'s path ends, by the run's timeout
// (124) or by itself when its shell can no longer fork, and leaves nothing behind.
func TestForkBombRun(t *testing.T) {
	h := newHarness(t)
	res, _, _, took := h.run(t, runner.Spec{
		Main:   []string{"sh", "-c", forkBomb + "; sleep 30"},
		Limits: wire.Limits{Memory: 256 << 20, Pids: 64, Timeout: 3 * time.Second},
	})
	t.Logf("fork bomb run: %+v in %s", res, took)
	if took > 30*time.Second {
		t.Errorf("the run took %s; the timeout was 3s", took)
	}
}

// TestMemoryBomb: a command that needs more memory than its limit is killed by the
// limit: the run reports OOM and exits 137. The same command under a larger limit
// succeeds, so it is the limit that stopped it.
func TestMemoryBomb(t *testing.T) {
	h := newHarness(t)
	bomb := []string{"dd", "if=/dev/zero", "of=/dev/null", "bs=200M", "count=1"}
	t.Run("under 64M", func(t *testing.T) {
		res, _, stderr, _ := h.run(t, runner.Spec{Main: bomb, Limits: wire.Limits{Memory: 64 << 20, Pids: 64, Timeout: 30 * time.Second}})
		if !res.OOM || res.ExitCode() != 137 {
			t.Errorf("ESCAPE: want OOM and exit 137 under a 64M limit, got %+v (exit %d), stderr %q", res, res.ExitCode(), stderr)
		}
	})
	t.Run("under 512M (control)", func(t *testing.T) {
		res, _, stderr, _ := h.run(t, runner.Spec{Main: bomb, Limits: wire.Limits{Memory: 512 << 20, Pids: 64, Timeout: 30 * time.Second}})
		if res.OOM || res.ExitCode() != 0 {
			t.Errorf("CONTROL FAILED: the same command should succeed under 512M, got %+v (exit %d), stderr %q", res, res.ExitCode(), stderr)
		}
	})
}

// TestTimeout: a command that outlives the run's timeout is killed: exit 124, promptly,
// and nothing of it is left (h.run checks).
func TestTimeout(t *testing.T) {
	h := newHarness(t)
	res, _, _, took := h.run(t, runner.Spec{Main: []string{"sh", "-c", "sleep 60 & sleep 60"}, Limits: wire.Limits{Memory: 64 << 20, Pids: 16, Timeout: time.Second}})
	if !res.TimedOut || res.ExitCode() != 124 {
		t.Errorf("want a timeout and exit 124, got %+v (exit %d)", res, res.ExitCode())
	}
	if took > 10*time.Second {
		t.Errorf("a 1s timeout took %s to end the run", took)
	}
}

// pidsRefused is how many forks the pids limit refused, from pids.events ("max N"). Where
// the kernel has no pids.events, reaching the limit counts as one.
func pidsRefused(t *testing.T, dir string, reached bool) int {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "pids.events"))
	if err != nil {
		if reached {
			return 1
		}
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(string(data)), "max")))
	return n
}

// sandboxProcs lists the processes of a sandbox's cgroup and the groups below it (the
// commands' group, and each command's), as the host sees them.
func sandboxProcs(t *testing.T, path string) []string {
	t.Helper()
	g, err := cgroups.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	pids, err := g.Pids()
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(pids))
	for i, pid := range pids {
		out[i] = strconv.Itoa(pid)
	}
	return out
}

// pidsCgroupDir is the pids controller's directory of a cgroup path (v1, or v2's unified
// directory).
func pidsCgroupDir(t *testing.T, path string) string {
	t.Helper()
	for _, d := range []string{filepath.Join("/sys/fs/cgroup/pids", path), filepath.Join("/sys/fs/cgroup", path)} {
		if _, err := os.Stat(filepath.Join(d, "pids.max")); err == nil {
			return d
		}
	}
	t.Fatalf("no pids cgroup directory for %s", path)
	return ""
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func readTrim(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}
