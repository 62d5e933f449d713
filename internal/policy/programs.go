package policy

import (
	"errors"
	"fmt"
	"strings"
)

// Programs returns the programs that running argv would run, by base name (no
// directory: what a capability's exec: resource names), each once, in the order found:
// argv[0], and every command it leads to through the same scan the shell rules use —
// sh -c strings, wrappers (env, nice, sudo, xargs, find -exec, …), pipelines, lists,
// substitutions, here-documents fed to a shell, trap actions.
//
// A shell's builtins are not programs and need no grant when a shell runs them (cd,
// echo, test, true, printf, read, …): a builtin runs in the shell, and a shell finds
// its builtin before any program of that name. The same name as argv[0], or as the
// command of a wrapper that is a program (env echo, xargs kill, find -exec test), is
// a program, and counted. Builtins that run other code are followed (command, builtin,
// exec, trap) or refused (eval, source, ., fc, compgen -C, …), and so is enable with an
// argument: it can turn a builtin off, so that its name runs a program. A call of a
// shell function counts as a program of its name (its body is scanned on its own):
// whether the name means the function when the call runs is not known from the text.
// A program that no word names counts too: xargs without a command runs echo; the
// shell that watch, flock -c and su -c start counts as "sh".
//
// It refuses, with an error naming the construct, when the programs cannot be known
// from the text: an empty argv, a NUL byte, a command name that is a variable, a
// substitution or a glob, eval, source, a string for sh -c that does not parse or is
// not literal, code nested too deeply, more than 1000 commands — everything the shell
// rules call undecidable (see the package documentation).
//
// What it does not see, by design: what a program does by itself. A shell given a
// script file or reading its standard input, an interpreter (python -c, node -e), make,
// git with its hooks and aliases: each runs whatever it is fed, and is named here, not
// what it runs. A grant of a shell or an interpreter is a grant of every program it can
// be made to start; grant one only where any program may run.
func Programs(argv []string) ([]string, error) {
	if len(argv) == 0 {
		return nil, errors.New("an empty argv runs nothing")
	}
	for i, a := range argv {
		if strings.IndexByte(a, 0) >= 0 {
			return nil, fmt.Errorf("argument %d holds a NUL byte, which no program can be given", i)
		}
	}
	s := scanners.Get().(*scanner)
	defer s.release()
	s.argv(argv)
	return s.programs()
}

// programs lists the programs of the commands found, or says why they cannot be known.
func (s *scanner) programs() ([]string, error) {
	if s.overflow {
		return nil, fmt.Errorf("more than %d commands: cannot tell what runs", maxCommands)
	}
	var names []string
	add := func(n string) {
		if !contains(names, n) {
			names = append(names, n)
		}
	}
	for i := range s.cmds {
		c := &s.cmds[i]
		if why := programWhy(c); why != "" {
			return nil, fmt.Errorf("%s: cannot tell what runs: %s", quoteCommand(s.text(i)), why)
		}
		n, err := programName(c)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", quoteCommand(s.text(i)), err)
		}
		if n != "" {
			add(n)
		}
		if c.implied != "" {
			add(c.implied)
		}
	}
	return names, nil
}

// programName is the base name of the program a command runs; "" for a builtin.
func programName(c *command) (string, error) {
	if len(c.words) == 0 {
		return "", nil
	}
	v := c.words[0].val
	if c.inShell && !strings.Contains(v, "/") && shellBuiltins[v] {
		return "", nil
	}
	n := v[strings.LastIndexByte(v, '/')+1:]
	if n == "" || n == "." || n == ".." {
		return "", fmt.Errorf("%q names no program", v)
	}
	return n, nil
}

// programWhy says why the programs a command runs cannot be known, or "": the scanner's
// reasons, and builtins that change which names are builtins or run a command string.
func programWhy(c *command) string {
	if c.why != "" || !c.inShell || len(c.words) == 0 {
		return c.why
	}
	args := c.words[1:]
	switch c.words[0].val {
	case "enable":
		if len(args) > 0 {
			return "enable with an argument can turn a builtin off, so that its name runs a program"
		}
	case "compgen", "complete":
		if shortFlag(args, 'C') {
			return c.words[0].val + " -C runs a command string"
		}
	case "bind":
		if shortFlag(args, 'x') {
			return "bind -x runs a command string when a key is pressed"
		}
	}
	return ""
}

// shellBuiltins are bash's builtins. eval, source, ., fc and the like are here too: the
// scanner refuses them before they are looked up, and follows command, builtin, exec and
// trap to what they run.
var shellBuiltins = map[string]bool{
	":": true, "[": true, ".": true, "alias": true, "bg": true, "bind": true, "break": true,
	"builtin": true, "caller": true, "cd": true, "command": true, "compgen": true,
	"complete": true, "compopt": true, "continue": true, "declare": true, "dirs": true,
	"disown": true, "echo": true, "enable": true, "eval": true, "exec": true, "exit": true,
	"export": true, "false": true, "fc": true, "fg": true, "getopts": true, "hash": true,
	"help": true, "history": true, "jobs": true, "kill": true, "let": true, "local": true,
	"logout": true, "mapfile": true, "popd": true, "printf": true, "pushd": true, "pwd": true,
	"read": true, "readarray": true, "readonly": true, "return": true, "set": true,
	"shift": true, "shopt": true, "source": true, "suspend": true, "test": true, "times": true,
	"trap": true, "true": true, "type": true, "typeset": true, "ulimit": true, "umask": true,
	"unalias": true, "unset": true, "wait": true,
}
