package session

import (
	"bufio"
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// A gated session may execute only the files its grant names: Landlock's execute right
// (checked by the kernel at every execve, for the program and for the ELF interpreter it
// opens) is handed out for those files alone, in the trampoline, before the command's
// first instruction, and holds for everything the command starts. A hook, a pager, a
// helper a configuration file names, a program written to the workspace: none can be
// executed. What Landlock does not see is a library the dynamic loader maps; the
// environment that could name one is an allowlist (package policy, GatedEnv).

// CanRestrictExec says why this kernel cannot limit execution, or "" when it can.
func CanRestrictExec() string {
	v, err := llsys.LandlockGetABIVersion()
	if err != nil || v < 1 {
		return "the sandbox's kernel has no Landlock (gVisor, and kernels built without it), which limits what a gated command may execute"
	}
	return ""
}

// maxExecChain bounds how far ExecClosure follows interpreters (#! lines, env, ELF
// interpreters); the kernel itself follows at most a few.
const maxExecChain = 8

// ExecClosure returns the files a program needs executable to run: the program file
// itself (symbolic links resolved), its #! interpreter (and the program env runs, found in
// path), and the ELF interpreter (the dynamic loader) of each.
func ExecClosure(programs []string, path string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	var add func(p string, depth int) error
	add = func(p string, depth int) error {
		if depth > maxExecChain {
			return fmt.Errorf("%s: interpreters nested over %d deep: %w", p, maxExecChain, errdefs.ErrInvalidArgument)
		}
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			return nil // not there: nothing to allow; the exec fails as it would
		}
		if seen[real] {
			return nil
		}
		seen[real] = true
		out = append(out, real)
		next, err := interpreters(real, path)
		if err != nil {
			return err
		}
		for _, n := range next {
			if err := add(n, depth+1); err != nil {
				return err
			}
		}
		return nil
	}
	for _, p := range programs {
		if err := add(p, 0); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// interpreters reads what the kernel runs to execute file: its #! interpreter (and, for
// env, the program env is told to run, found in path), or its ELF interpreter.
func interpreters(file, path string) ([]string, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, nil
	}
	defer f.Close()
	head := make([]byte, 4)
	if n, _ := f.ReadAt(head, 0); n < 2 {
		return nil, nil
	}
	if string(head[:2]) == "#!" {
		line, _ := bufio.NewReaderSize(f, 512).ReadString('\n')
		words := strings.Fields(strings.TrimPrefix(line, "#!"))
		if len(words) == 0 {
			return nil, nil
		}
		out := []string{words[0]}
		if filepath.Base(words[0]) == "env" {
			for _, w := range words[1:] {
				if strings.HasPrefix(w, "-") || strings.Contains(w, "=") {
					continue
				}
				if p, err := lookPath(w, path, "/"); err == nil {
					out = append(out, p)
				}
				break
			}
		}
		return out, nil
	}
	if string(head) != elf.ELFMAG {
		return nil, nil
	}
	ef, err := elf.NewFile(f)
	if err != nil {
		return nil, nil
	}
	defer ef.Close()
	for _, p := range ef.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			if _, err := p.ReadAt(b, 0); err != nil {
				return nil, fmt.Errorf("%s: read its ELF interpreter: %w", file, err)
			}
			return []string{strings.TrimRight(string(b), "\x00")}, nil
		}
	}
	return nil, nil
}

// Resolve finds name as a session started now would: in the default environment's PATH,
// from dir (the workspace when empty).
func (m *Manager) Resolve(name, dir string) (string, error) {
	if dir == "" {
		dir = m.workspace
	} else if !filepath.IsAbs(dir) {
		dir = filepath.Join(m.workspace, dir)
	}
	return lookPath(name, envValue(m.defaultEnv, "PATH"), dir)
}

// DefaultPath is the PATH of the default environment.
func (m *Manager) DefaultPath() string { return envValue(m.defaultEnv, "PATH") }
