package bench

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/paddockhq/paddock/internal/cgroups"
	"github.com/paddockhq/paddock/internal/runner"
	"github.com/paddockhq/paddock/internal/sandbox/microvm"
	"github.com/paddockhq/paddock/internal/wire"
	pb "github.com/paddockhq/paddock/internal/wire/agentv1"
)

// microvmRounds is how many samples the microVM table takes of each variant: a guest boots
// in seconds under TCG, so fewer than the other tables.
const microvmRounds = 5

// bootToExec creates a sandbox of tier through the runner (no main command) and times
// from the call to the end of the first `Execute(echo hi)`: what a caller waits before a
// new sandbox has run something. It returns the sandbox, still running, for the caller to
// measure and destroy.
func (e *Env) bootToExec(ctx context.Context, tier wire.Tier) (time.Duration, *runner.Sandbox, error) {
	start := time.Now()
	sb, err := e.Runner.Create(ctx, runner.Spec{User: benchUser, Tier: tier})
	if err != nil {
		return 0, nil, err
	}
	res, err := sb.Agent().Execute(ctx, &pb.ExecuteRequest{Argv: echoHi})
	d := time.Since(start)
	if err == nil && string(res.GetStdout()) != "hi\n" {
		err = fmt.Errorf("%s sandbox: echo hi printed %q", tier, res.GetStdout())
	}
	if err != nil {
		return d, nil, errors.Join(err, sb.Destroy(context.WithoutCancel(ctx)))
	}
	return d, sb, nil
}

// qemuMemory is the resident memory of the QEMU process in a microVM sandbox's cgroup, and
// the cgroup's charge, in bytes.
func qemuMemory(cgroup string) (rss, charge int64, err error) {
	g, err := cgroups.Load(cgroup)
	if err != nil {
		return 0, 0, err
	}
	pids, err := g.Pids()
	if err != nil {
		return 0, 0, err
	}
	for _, pid := range pids {
		if strings.HasPrefix(strings.TrimSpace(readFile(fmt.Sprintf("/proc/%d/comm", pid))), "qemu") {
			rss = kB(readFile(fmt.Sprintf("/proc/%d/status", pid)), "VmRSS")
		}
	}
	if rss == 0 {
		return 0, 0, fmt.Errorf("no QEMU among the processes %v of cgroup %s", pids, cgroup)
	}
	charge, _, _, err = cgroupMemory(cgroup)
	return rss, charge, err
}

// MicroVMTable measures the microVM tier against the container tier: `paddock run` to its
// first byte, boot to the first exec through the runner, and what an idle guest costs the
// host in memory.
func (e *Env) MicroVMTable(ctx context.Context, o Options) (*Table, error) {
	in, err := microvm.Locate(filepath.Join(runner.InstallPrefix, "guest"))
	if err != nil {
		return nil, err
	}
	probe := microvm.DetectAccel(ctx, in, e.Agent, e.Config.StateDir, e.Config.SandboxUID, e.Config.SandboxGID)
	floor := e.newVMFloor(ctx, in, probe.Accel)
	rec := newRecorder()
	bootFloor := floor.round(func() error {
		d, rss, err := floor.Boot(ctx, time.Second)
		rec.add("exec.floor", ms(d))
		rec.add("rss.floor", mib(rss))
		return err
	})
	runVM := func() error {
		t, err := timeEcho(command(ctx, e.Paddock, "run", "--tier", "microvm", "--", "echo", "hi"))
		rec.add("run.vm", ms(t.First))
		return err
	}
	runCT := func() error {
		t, err := timeEcho(command(ctx, e.Paddock, "run", "--", "echo", "hi"))
		rec.add("run.ct", ms(t.First))
		return err
	}
	execVM := func() error {
		d, sb, err := e.bootToExec(ctx, wire.TierMicroVM)
		if err != nil {
			return err
		}
		rec.add("exec.vm", ms(d))
		// Idle for a second, as the idle-memory table does, then read QEMU's memory.
		time.Sleep(time.Second)
		rss, charge, merr := qemuMemory(sb.Cgroup())
		rec.add("rss.vm", mib(rss))
		rec.add("charge.vm", mib(charge))
		return errors.Join(merr, sb.Destroy(context.WithoutCancel(ctx)))
	}
	execCT := func() error {
		d, sb, err := e.bootToExec(ctx, wire.TierContainer)
		if err != nil {
			return err
		}
		rec.add("exec.ct", ms(d))
		return sb.Destroy(context.WithoutCancel(ctx))
	}
	rounds, warmup := microvmRounds, 1
	if o.Quick {
		rounds, warmup = 1, 0
	}
	if err := interleave(rec, warmup, rounds, runVM, runCT, execVM, execCT, bootFloor); err != nil {
		return nil, err
	}
	exF, rssF := rec.summary("exec.floor"), rec.summary("rss.floor")
	runV, runC := rec.summary("run.vm"), rec.summary("run.ct")
	exV, exC := rec.summary("exec.vm"), rec.summary("exec.ct")
	rss, charge := rec.summary("rss.vm"), rec.summary("charge.vm")
	accel := strings.ToUpper(string(probe.Accel))
	guest := float64(microvm.DefaultMemory >> 20)
	if m := e.Config.Limits.Memory; m > 0 {
		guest = float64(m >> 20)
	}
	t := &Table{
		Title: "11. MicroVM tier: boot to first exec, and an idle guest's memory",
		About: fmt.Sprintf("The microvm tier (QEMU `-M microvm`, the guest kernel unpacked by scripts/setup.sh, paddock-agent as init, %.0f MiB of guest RAM) "+
			"against the container tier (runc), interleaved, %d rounds after a warm-up. `paddock run` is the CLI with its default configuration, timed from "+
			"fork to the first byte of `echo hi`; *boot to first exec* is runner.Create with no main command and then one `Execute(echo hi)` on the new "+
			"sandbox's channel, in process. The guest's memory is read after the exec and a second of idling: the QEMU process's VmRSS, and its cgroup's "+
			"charge. The *floor* is a bare QEMU boot of the same machine and kernel (same accelerator, RAM and command line) whose initramfs holds "+
			"one static program as /init, which prints a line on the serial console (QEMU's stdout) and then idles: timed from QEMU's fork to that "+
			"line, and its QEMU's VmRSS read after a second of idling; it has no 9p shares, no channel, no QMP, no modules to load. The targets are "+
			"ratios to the floor, judged under either accelerator since the floor runs under the same one. The accelerator here: **%s** (%s).", guest, rounds, accel, probe.Reason),
		Rows: []Row{
			{Name: "`paddock run --tier microvm -- echo hi`: fork → first byte", Unit: "ms", Summary: runV, Ratio: ratio(runV.P50, runC.P50)},
			{Name: "`paddock run -- echo hi` (container): fork → first byte", Unit: "ms", Summary: runC, Ratio: "1.00× (baseline)"},
			{Name: "microvm: boot to first exec", Unit: "ms", Summary: exV, Ratio: ratio(exV.P50, exC.P50) + "; " + peerRatio(floor.peer, exV.P50, exF.P50) + " the floor",
				Target: vmBootTarget.String(), Met: vmBootTarget.met(exV.P50, exF.P50, floor.missing)},
			floor.row(Row{Name: "*floor:* bare QEMU boot of the same kernel → its init's first line", Unit: "ms", Summary: exF, Ratio: ratio(exF.P50, exC.P50)}),
			{Name: "container: create to first exec", Unit: "ms", Summary: exC, Ratio: "1.00× (baseline)"},
			{Name: "idle guest: QEMU VmRSS", Unit: "MiB", Summary: rss, Ratio: peerRatio(floor.peer, rss.P50, rssF.P50) + " the floor",
				Target: vmMemTarget.String(), Met: vmMemTarget.met(rss.P50, rssF.P50, floor.missing)},
			floor.row(Row{Name: "*floor:* bare QEMU's VmRSS, its guest idle", Unit: "MiB", Summary: rssF, Ratio: "1.00× (floor)"}),
			{Name: "idle guest: cgroup charge", Unit: "MiB", Summary: charge},
		},
	}
	t.Notes = []string{
		fmt.Sprintf("Under %s a new microVM runs its first command %.0f ms after it was asked for, against %.0f ms for a container (%s); `paddock run` "+
			"prints its first byte after %.0f ms against %.0f ms.", accel, exV.P50, exC.P50, ratio(exV.P50, exC.P50), runV.P50, runC.P50),
		"The idle guest's QEMU holds what the guest kernel and the agent touched of the guest's RAM plus QEMU's own heap and, under TCG, its translation cache " +
			"(up to 64 MiB, `tb-size`): it is not an overhead over an idle container's 3-4 MiB but the guest's whole footprint; the floor's QEMU holds the same " +
			"kinds of pages for a guest that ran one small program.",
		vmFloorNote(floor, exV, exF, rss, rssF),
		"To measure under KVM on a host where it works: run `make bench` there as root; the first microVM start boots a trial guest under KVM " +
			"(microvm.DetectAccel) and, if its agent answers within 5 s, every guest after it runs under KVM, as this table's header then says. " +
			"A host where `paddock serve` already decided keeps the decision in <state_dir>/microvm-accel.json for the rest of its boot.",
	}
	return t, nil
}

// Table 11's targets, against the bare boot of the same run.
var (
	vmBootTarget = atMost(1.5, "the bare boot")
	vmMemTarget  = atMost(1.15, "the bare boot")
)

func vmFloorNote(f *vmFloor, exV, exF, rss, rssF Summary) string {
	if f.missing != "" {
		return "The bare boot was not measured (" + f.missing + "), so the targets are not judged."
	}
	return fmt.Sprintf("Against the bare boot of the same run: boot to first exec %.0f ms against %.0f ms (%s; target %s: %s); QEMU's VmRSS %.0f MiB "+
		"against %.0f MiB (%s; target %s: %s). What paddock adds to the boot is QMP's handshake and the move into the sandbox's cgroup, the modules "+
		"the agent loads (virtio, 9p), its mounts of /usr and the workspace over 9p, and the channel's first call. The absolute figures are "+
		"information: they follow the accelerator and the machine's load, and the ratios to the floor do not.",
		exV.P50, exF.P50, ratio(exV.P50, exF.P50), vmBootTarget, vmBootTarget.word(exV.P50, exF.P50, ""),
		rss.P50, rssF.P50, ratio(rss.P50, rssF.P50), vmMemTarget, vmMemTarget.word(rss.P50, rssF.P50, ""))
}
