package policy

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// What an exec request brings besides its argv: its environment and its standard input.
// The engine decides words; these say where code could come from that no word shows.

// StdinShell reports whether argv runs a shell that reads its commands from standard
// input: sh, bash -i, env bash, sudo -s, su, or sh -c 'bash' (whose inner shell inherits
// the outer one's input). A shell with -c, a script file or a here-document of its own
// does not. It errs on the side of yes: sh -c 'echo x | bash' counts, though that bash
// reads the pipe. The caller decides that input as a script ([Policy.ShellScript]) when it
// has all of it, and as an interactive session ([Policy.Interactive]) when it does not.
func StdinShell(argv []string) bool {
	if len(argv) == 0 {
		return false
	}
	s := scanners.Get().(*scanner)
	defer s.release()
	s.argv(argv)
	return s.stdinShell
}

// Interactive decides a session whose commands arrive one by one while it runs (an
// interactive shell on a terminal): they cannot be decided before they run, so with shell
// rules it is denied unless the policy says shell.interactive: allow.
func (p *Policy) Interactive() Decision {
	switch {
	case !p.shell.active():
		return noShellRules
	case p.shell.interactive:
		return allow("shell.interactive", "the policy allows interactive shells; the commands typed in one are not decided")
	}
	return deny("shell.interactive", "an interactive shell reads its commands while it runs, so they cannot be decided before they run; run each command with exec, or set shell.interactive: allow")
}

// ShellEnv decides the environment an exec adds: a variable that bash runs as code is
// undecidable, as the same assignment in a script is (see [EnvCode]).
func (p *Policy) ShellEnv(env []string) Decision {
	if !p.shell.active() {
		return noShellRules
	}
	if err := EnvCode(env); err != nil {
		return deny("shell", "%v: cannot be decided before it runs", err)
	}
	return allow("shell", "no variable in the environment runs code")
}

// GatedEnv decides the environment an exec adds under shell rules: only the safe set and
// the names shell.env lists ([GatedEnv]).
func (p *Policy) GatedEnv(env []string) Decision {
	if !p.shell.active() {
		return noShellRules
	}
	if err := GatedEnv(env, p.shell.env); err != nil {
		rule := "shell.env"
		if e, ok := errors.AsType[*EnvError](err); ok {
			rule = e.Rule
		}
		return deny(rule, "%v", err)
	}
	return allow("shell.env", "every variable the exec sets is allowed")
}

// EnvNames are the names shell.env lists.
func (p *Policy) EnvNames() []string { return slices.Clone(p.shell.env) }

// EnvCode says which variable of env bash would run as code, or returns nil: what runs
// then is in no word of the argv, so neither the shell rules nor [Programs] see it.
// BASH_FUNC_name%% defines a function that replaces a command of that name in every bash
// started with it; a prompt variable (PS0–PS4, PROMPT_COMMAND) with a substitution runs
// it when the prompt is shown.
func EnvCode(env []string) error {
	for i, kv := range env {
		name, val, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(name, "BASH_FUNC_"):
			return fmt.Errorf("env[%d]: %s defines a bash function, code that runs in place of a command", i, name)
		case promptVars[name] && strings.ContainsAny(val, "$`"):
			return fmt.Errorf("env[%d]: %s is expanded as a prompt, and its value can run code", i, name)
		}
	}
	return nil
}

// HasShellRules reports whether the policy has shell rules (a deny list, an allow list
// or both). Without them every command is allowed, and nothing else about an exec needs
// deciding.
func (p *Policy) HasShellRules() bool { return p.shell.active() }
