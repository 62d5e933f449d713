package microvm

import (
	"debug/elf"
	"fmt"
	"runtime"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// elfMachine is the ELF machine of the host's architecture, which the guest shares.
var elfMachine = map[string]elf.Machine{
	"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64, "386": elf.EM_386, "arm": elf.EM_ARM,
	"riscv64": elf.EM_RISCV, "ppc64le": elf.EM_PPC64, "s390x": elf.EM_S390, "loong64": elf.EM_LOONGARCH,
}

// fixAgent is what to do about an agent the guest cannot run.
const fixAgent = "build it with `make build` (or CGO_ENABLED=0 go build ./cmd/paddock-agent)"

// CheckAgent checks that the agent at p can be the guest's /init: a statically linked ELF
// for the host's architecture. The kernel runs /init before any library or loader is
// reachable, so a dynamically linked agent panics the guest ("No working init found").
func CheckAgent(p string) error {
	f, err := elf.Open(p)
	if err != nil {
		return fmt.Errorf("agent %s is not an ELF executable (%v); %s: %w", p, err, fixAgent, errdefs.ErrFailedPrecondition)
	}
	defer f.Close()
	if want, ok := elfMachine[runtime.GOARCH]; ok && f.Machine != want {
		return fmt.Errorf("agent %s is built for %v, this host is %s; %s: %w", p, f.Machine, runtime.GOARCH, fixAgent, errdefs.ErrFailedPrecondition)
	}
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return fmt.Errorf("agent %s is dynamically linked (it needs a loader, which the microVM's guest does not have when it starts the agent); %s: %w", p, fixAgent, errdefs.ErrFailedPrecondition)
		}
	}
	if libs, err := f.ImportedLibraries(); err == nil && len(libs) > 0 {
		return fmt.Errorf("agent %s is dynamically linked (it needs %v, which the microVM's guest does not have when it starts the agent); %s: %w", p, libs, fixAgent, errdefs.ErrFailedPrecondition)
	}
	return nil
}
