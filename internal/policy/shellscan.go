package policy

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

const (
	// maxCommands bounds the simple commands one decision looks at.
	maxCommands = 1000
	// maxNest bounds code inside code: sh -c in sh -c, a wrapper of a wrapper.
	maxNest = 8
	// maxASTDepth bounds statements nested in statements within one script.
	maxASTDepth = 200
	// maxScript bounds the size of a script (or sh -c string) the engine parses.
	maxScript = 256 << 10
)

// scope is one parsed script: the source that positions point into.
type scope struct {
	src string
}

// link records that the commands in from feed those in to: earlier and later stages of
// a pipeline, or the substitutions in a command's words and its input, and the command.
type link struct{ from, to []int }

// command is one simple command found in the input.
type command struct {
	words      []word
	scope      *scope // nil for an argv
	start, end uint   // the command's text in scope.src
	name       string // program name, when literal
	why        string // why the command cannot be decided, if it cannot
	view       *argView
	// inShell is set for a command a shell runs itself, where a builtin of its name runs
	// rather than a program; not for an argv or a command a program (a wrapper) runs.
	inShell bool
	// implied is a program the command runs that no word names: the echo of xargs
	// without a command, the sh that watch, flock -c and su -c start.
	implied string
}

// at is where the scanner is: in which script, how deeply nested.
type at struct {
	sc    *scope
	nest  int // levels of code in code (sh -c, wrappers)
	depth int // levels of statements in statements
}

// scanner finds every simple command of a script or argv, with what can be known of
// each before it runs.
type scanner struct {
	parser   *syntax.Parser
	cmds     []command
	links    []link
	overflow bool
	reach    [][]tri    // per deny rule with several stages, computed on demand
	fed      [][]uint64 // per command, a bit per command that feeds it, computed on demand
	// stdinShell is set when a shell was found that reads its commands from a standard
	// input no redirection in the text gives it: the caller's (see StdinShell).
	stdinShell bool
}

func (s *scanner) reset() {
	clear(s.cmds)
	clear(s.links)
	clear(s.reach)
	s.cmds, s.links, s.reach, s.fed, s.overflow = s.cmds[:0], s.links[:0], s.reach[:0], nil, false
	s.stdinShell = false
}

func (s *scanner) add(c command) int {
	if len(s.cmds) >= maxCommands {
		s.overflow = true
		return -1
	}
	if len(c.words) > 0 && c.why == "" {
		switch w := c.words[0]; {
		case w.known && !w.glob:
			c.name = progName(w.val)
		case w.glob:
			c.why = fmt.Sprintf("the program name %q is a glob: the file names it matches decide what runs", w.val)
		default:
			c.why = "the program name is not literal: what runs is decided when it runs"
		}
	}
	s.cmds = append(s.cmds, c)
	return len(s.cmds) - 1
}

// pseudo records a construct that is not a command but cannot be decided.
func (s *scanner) pseudo(n syntax.Node, sc *scope, why string) []int {
	id := s.add(command{scope: sc, start: n.Pos().Offset(), end: n.End().Offset(), why: why})
	if id < 0 {
		return nil
	}
	return []int{id}
}

// link records that the commands in from feed those in to.
func (s *scanner) link(from, to []int) {
	if len(from) > 0 && len(to) > 0 {
		s.links = append(s.links, link{from, to})
	}
}

// feeds reports whether command i feeds command j. The first call turns the links into a
// bit set per command: a pipeline of n stages nested n deep is n² pairs, not n⁴.
func (s *scanner) feeds(i, j int) bool {
	if s.fed == nil {
		words := (len(s.cmds) + 63) / 64
		s.fed = make([][]uint64, len(s.cmds))
		bits := make([]uint64, len(s.cmds)*words)
		for k := range s.fed {
			s.fed[k] = bits[k*words : (k+1)*words]
		}
		from := make([]uint64, words)
		for _, l := range s.links {
			clear(from)
			for _, f := range l.from {
				from[f/64] |= 1 << (f % 64)
			}
			for _, t := range l.to {
				for w := range from {
					s.fed[t][w] |= from[w]
				}
			}
		}
	}
	return s.fed[j][i/64]&(1<<(i%64)) != 0
}

// script parses src and scans it.
func (s *scanner) script(src string, a at) ([]int, error) {
	if len(src) > maxScript {
		return nil, fmt.Errorf("longer than %d bytes", maxScript)
	}
	f, err := s.parser.Parse(strings.NewReader(src), "")
	if err != nil {
		return nil, err
	}
	a.sc = &scope{src: src}
	return s.stmts(f.Stmts, a), nil
}

// argv scans an exec argv: words taken as they are, no shell in between.
func (s *scanner) argv(argv []string) {
	words := make([]word, len(argv))
	for i, v := range argv {
		words[i] = word{val: v, known: true}
	}
	if id := s.add(command{words: words}); id >= 0 {
		s.special(id, nil, at{})
	}
}

func (s *scanner) stmts(list []*syntax.Stmt, a at) []int {
	var ids []int
	for _, st := range list {
		ids = append(ids, s.stmt(st, a)...)
	}
	return ids
}

func (s *scanner) stmt(st *syntax.Stmt, a at) []int {
	if s.overflow {
		return nil
	}
	if a.depth > maxASTDepth {
		return s.pseudo(st, a.sc, fmt.Sprintf("statements nested more than %d levels deep", maxASTDepth))
	}
	a.depth++
	var ids []int
	switch c := st.Cmd.(type) {
	case nil:
	case *syntax.CallExpr:
		ids = s.call(c, st.Redirs, a)
	case *syntax.BinaryCmd:
		x := s.stmt(c.X, a)
		y := s.stmt(c.Y, a)
		if c.Op == syntax.Pipe || c.Op == syntax.PipeAll {
			s.link(x, y)
		}
		ids = slices.Concat(x, y)
	case *syntax.FuncDecl:
		ids = s.stmt(c.Body, a)
	default:
		ids = s.compound(c, a)
	}
	if len(st.Redirs) > 0 {
		var fed []int
		for _, r := range st.Redirs {
			fed = append(fed, s.nested(r, a)...)
		}
		s.link(fed, ids)
		ids = append(fed, ids...)
	}
	return ids
}

// nested scans the command and process substitutions inside a node.
func (s *scanner) nested(n syntax.Node, a at) []int {
	if w, ok := n.(*syntax.Word); ok && len(w.Parts) == 1 {
		if _, lit := w.Parts[0].(*syntax.Lit); lit {
			return nil
		}
	}
	a.depth++
	var ids []int
	syntax.Walk(n, func(n syntax.Node) bool {
		switch n := n.(type) {
		case *syntax.CmdSubst:
			ids = append(ids, s.stmts(n.Stmts, a)...)
			return false
		case *syntax.ProcSubst:
			ids = append(ids, s.stmts(n.Stmts, a)...)
			return false
		}
		return true
	})
	return ids
}

// compound scans an if, while, for, case, block, subshell, [[ ]], (( )), let, declare,
// time or coproc: every statement and substitution inside it.
func (s *scanner) compound(c syntax.Command, a at) []int {
	var ids []int
	syntax.Walk(c, func(n syntax.Node) bool {
		switch n := n.(type) {
		case *syntax.Stmt:
			ids = append(ids, s.stmt(n, a)...)
			return false
		case *syntax.CmdSubst:
			ids = append(ids, s.stmts(n.Stmts, a)...)
			return false
		case *syntax.ProcSubst:
			ids = append(ids, s.stmts(n.Stmts, a)...)
			return false
		case *syntax.DeclClause:
			for _, as := range n.Args {
				if why := assignWhy(n.Variant.Value, as); why != "" {
					ids = append(ids, s.pseudo(as, a.sc, why)...)
				}
			}
		}
		return true
	})
	return ids
}

func (s *scanner) call(c *syntax.CallExpr, redirs []*syntax.Redirect, a at) []int {
	var fed []int
	for _, as := range c.Assigns {
		fed = append(fed, s.nested(as, a)...)
		if why := assignWhy("", as); why != "" {
			fed = append(fed, s.pseudo(as, a.sc, why)...)
		}
	}
	if len(c.Args) == 0 {
		return fed
	}
	words := make([]word, 0, len(c.Args))
	for _, w := range c.Args {
		fed = append(fed, s.nested(w, a)...)
		words = appendWords(words, w)
	}
	id := s.add(command{words: words, scope: a.sc, start: c.Pos().Offset(), end: c.End().Offset(), inShell: true})
	if id < 0 {
		return fed
	}
	ids := append([]int{id}, s.special(id, redirs, a)...)
	s.link(fed, ids)
	return append(fed, ids...)
}

// promptVars are expanded, command substitutions included, when a prompt is shown
// (PS4 at every command under set -x).
var promptVars = map[string]bool{"PS0": true, "PS1": true, "PS2": true, "PS3": true, "PS4": true, "PROMPT_COMMAND": true}

// assignWhy says why an assignment cannot be decided, or "".
func assignWhy(variant string, as *syntax.Assign) string {
	if as.Value == nil {
		return ""
	}
	v := evalWord(as.Value, 0, 0)
	if as.Naked && as.Name == nil {
		if !v.known {
			return variant + " with an argument that is not literal can run code from a variable"
		}
		if subscriptCode(v.val) {
			return fmt.Sprintf("%s evaluates the array subscript in %q, code included", variant, v.val)
		}
		return ""
	}
	if as.Name != nil && promptVars[as.Name.Value] && (!v.known || strings.ContainsAny(v.val, "$`")) {
		return as.Name.Value + " is expanded as a prompt, and its value can run code"
	}
	if as.Name != nil {
		return AssignCode(as.Name.Value)
	}
	return ""
}

// subscriptCode reports whether a variable name given to a builtin has a subscript that
// bash would evaluate, running any substitution in it: a[$(cmd)].
func subscriptCode(v string) bool {
	i := strings.IndexByte(v, '[')
	return i >= 0 && strings.ContainsAny(v[i:], "$`")
}

// varBuiltins take variable names as arguments.
var varBuiltins = map[string]bool{
	"read": true, "printf": true, "unset": true, "declare": true, "typeset": true, "local": true,
	"export": true, "readonly": true, "test": true, "[": true, "getopts": true, "wait": true,
	"mapfile": true, "readarray": true, "let": true,
}

// shortFlag reports whether args hold the short option ch, before any "--".
func shortFlag(args []word, ch byte) bool {
	for _, w := range args {
		if !w.known {
			continue
		}
		if w.val == "--" {
			return false
		}
		if len(w.val) > 1 && w.val[0] == '-' && w.val[1] != '-' && strings.IndexByte(w.val[1:], ch) >= 0 {
			return true
		}
	}
	return false
}

// special looks into commands that run other code, and marks those that make the
// script undecidable. It returns the commands found inside.
func (s *scanner) special(id int, redirs []*syntax.Redirect, a at) []int {
	c := &s.cmds[id]
	if c.name == "" {
		return nil
	}
	args := c.words[1:]
	switch c.name {
	case "eval":
		c.why = "eval runs a string as shell code"
	case "source", ".":
		c.why = c.name + " runs the commands in a file"
	case "fc":
		c.why = "fc runs commands from the history"
	case "alias":
		for _, w := range args {
			if !w.known || strings.Contains(w.val, "=") {
				c.why = "alias definitions change what later commands mean"
				break
			}
		}
	case "hash":
		if shortFlag(args, 'p') {
			c.why = "hash -p changes which program a name runs"
		}
	case "mapfile", "readarray":
		if shortFlag(args, 'C') {
			c.why = c.name + " -C runs a callback"
		}
	case "enable":
		if shortFlag(args, 'f') {
			c.why = "enable -f loads a builtin from a file"
		}
	case "trap":
		return s.trap(id, args, a)
	case "sh":
		return s.shell(id, args, redirs, a)
	case "find":
		return s.find(id, args, a)
	}
	if c.why == "" && varBuiltins[c.name] {
		for _, w := range args {
			if w.known && subscriptCode(w.val) {
				c.why = fmt.Sprintf("%s evaluates the array subscript in %q, code included", c.name, w.val)
				break
			}
		}
	}
	if spec, ok := wrappers[c.name]; ok && c.why == "" {
		return s.wrapper(id, c.name, spec, args, redirs, a)
	}
	return nil
}

// inner records the command a wrapper runs, and what that command runs in turn.
func (s *scanner) inner(parent int, words []word, redirs []*syntax.Redirect, a at) []int {
	a.nest++
	p := &s.cmds[parent]
	// command and builtin are the shell's own: what they run is a builtin where one has
	// its name. Every other wrapper is a program, and execs what it runs.
	c := command{words: words, scope: p.scope, start: words[0].pos, inShell: p.inShell && (p.name == "command" || p.name == "builtin")}
	for _, w := range words {
		c.end = max(c.end, w.end)
	}
	if a.nest > maxNest {
		c.why = fmt.Sprintf("commands nested more than %d levels deep", maxNest)
	}
	id := s.add(c)
	if id < 0 {
		return nil
	}
	return append([]int{id}, s.special(id, redirs, a)...)
}

// innerScript scans code that a command runs from a string (sh -c, trap, su -c).
func (s *scanner) innerScript(parent int, src, what string, a at) []int {
	a.nest++
	if a.nest > maxNest {
		s.cmds[parent].why = fmt.Sprintf("commands nested more than %d levels deep", maxNest)
		return nil
	}
	ids, err := s.script(src, a)
	if err != nil {
		s.cmds[parent].why = fmt.Sprintf("%s does not parse: %v", what, err)
		return nil
	}
	return ids
}

func (s *scanner) trap(id int, args []word, a at) []int {
	i := 0
	for ; i < len(args) && args[i].known && len(args[i].val) > 1 && args[i].val[0] == '-'; i++ {
		if args[i].val == "--" {
			i++
			break
		}
	}
	ops := args[i:]
	if len(ops) < 2 {
		return nil // trap -p, or resetting one signal
	}
	if !ops[0].known {
		s.cmds[id].why = "trap with an action that is not literal"
		return nil
	}
	if ops[0].val == "" || ops[0].val == "-" {
		return nil
	}
	return s.innerScript(id, ops[0].val, "the trap action", a)
}

var (
	shellLong      = []string{"login", "noediting", "noprofile", "norc", "posix", "restricted", "verbose", "version", "help", "debugger", "dump-po-strings", "dump-strings", "pretty-print"}
	shellLongValue = []string{"rcfile", "init-file"}
)

// shell follows sh -c strings, and here-documents a shell reads its commands from.
func (s *scanner) shell(id int, args []word, redirs []*syntax.Redirect, a at) []int {
	cmode, smode := false, false
	i := 0
options:
	for ; i < len(args); i++ {
		w := args[i]
		if !w.known {
			switch {
			case cmode:
				s.cmds[id].why = "sh -c with a command string that is not literal"
				return nil
			case flagCapable(w):
				s.cmds[id].why = "a shell given a word that is not literal where its options go"
				return nil
			}
			break
		}
		v := w.val
		switch {
		case v == "--" || v == "-":
			i++
			break options
		case strings.HasPrefix(v, "--"):
			switch long := v[2:]; {
			case contains(shellLongValue, long):
				i++
			case !contains(shellLong, long):
				s.cmds[id].why = fmt.Sprintf("a shell with the unknown option %s: cannot tell what it runs", v)
				return nil
			}
		case len(v) > 1 && (v[0] == '-' || v[0] == '+'):
			for j := 1; j < len(v); j++ {
				switch v[j] {
				case 'c':
					cmode = true
				case 's':
					smode = true
				case 'o', 'O':
					if j == len(v)-1 {
						i++
					}
					j = len(v)
				}
			}
		default:
			break options
		}
	}
	ops := args[min(i, len(args)):]
	switch {
	case cmode:
		if len(ops) == 0 {
			return nil
		}
		if !ops[0].known {
			s.cmds[id].why = "sh -c with a command string that is not literal"
			return nil
		}
		return s.innerScript(id, ops[0].val, "the sh -c string", a)
	case len(ops) > 0 && !smode:
		return nil // runs a file: its contents are not seen
	}
	src, known, ok := stdinScript(redirs)
	if !ok {
		s.stdinShell = s.stdinShell || !redirectsStdin(redirs)
		return nil
	}
	if !known {
		s.cmds[id].why = "a shell reading a here-document that is not literal"
		return nil
	}
	return s.innerScript(id, src, "the here-document", a)
}

// stdinScript finds a here-document or here-string on standard input.
func stdinScript(redirs []*syntax.Redirect) (src string, known, ok bool) {
	var in *syntax.Redirect
	for _, r := range redirs {
		if r.N != nil && r.N.Value != "0" {
			continue
		}
		switch r.Op {
		case syntax.RdrIn, syntax.RdrInOut, syntax.DplIn, syntax.Hdoc, syntax.DashHdoc, syntax.WordHdoc:
			in = r
		}
	}
	if in == nil {
		return "", false, false
	}
	switch in.Op {
	case syntax.WordHdoc:
		w := evalWord(in.Word, 0, 0)
		return w.val + "\n", w.known && !w.glob, true
	case syntax.Hdoc, syntax.DashHdoc:
		if in.Hdoc == nil {
			return "", true, true
		}
		var b strings.Builder
		quoted := in.Word.Lit() == "" || strings.Contains(in.Word.Lit(), `\`)
		for _, p := range in.Hdoc.Parts {
			lit, isLit := p.(*syntax.Lit)
			if !isLit {
				return "", false, true
			}
			if quoted {
				b.WriteString(lit.Value)
			} else {
				b.WriteString(unescape(lit.Value, heredocEscapes))
			}
		}
		return b.String(), true, true
	}
	return "", false, false // a file: its contents are not seen
}

// redirectsStdin reports whether redirs give standard input a file or a document.
func redirectsStdin(redirs []*syntax.Redirect) bool {
	for _, r := range redirs {
		if r.N != nil && r.N.Value != "0" {
			continue
		}
		switch r.Op {
		case syntax.RdrIn, syntax.RdrInOut, syntax.DplIn, syntax.Hdoc, syntax.DashHdoc, syntax.WordHdoc:
			return true
		}
	}
	return false
}

// find follows -exec, -execdir, -ok and -okdir.
func (s *scanner) find(id int, args []word, a at) []int {
	// {} is a path under the starting point: with one literal starting point (or none,
	// which is "."), that is what it begins with.
	start := "."
	for _, w := range args {
		if !w.known {
			start = ""
			break
		}
		if strings.HasPrefix(w.val, "-") || w.val == "(" || w.val == "!" {
			break
		}
		if start != "." {
			start = "" // several starting points
			break
		}
		start = w.val
	}
	var ids []int
	for i := 0; i < len(args); i++ {
		w := args[i]
		from := -1
		switch {
		case w.known && (w.val == "-exec" || w.val == "-execdir" || w.val == "-ok" || w.val == "-okdir"):
			from = i + 1
		case !w.known && w.split:
			s.cmds[id].why = "find with a word that is not literal: it could be -exec and a command"
			return nil
		case !w.known && flagCapable(w) && i+1 < len(args) && args[i+1].known && !strings.HasPrefix(args[i+1].val, "-") &&
			args[i+1].val != ";" && args[i+1].val != "+" && args[i+1].val != "(" && args[i+1].val != "!":
			from = i + 1 // the word could be -exec: what follows would be the command
		}
		if from < 0 {
			continue
		}
		end := from
		for end < len(args) && !(args[end].known && (args[end].val == ";" || args[end].val == "+")) {
			end++
		}
		if end > from {
			inner := make([]word, end-from)
			copy(inner, args[from:end])
			for k, iw := range inner {
				if iw.known && strings.Contains(iw.val, "{}") {
					before, after, _ := strings.Cut(iw.val, "{}")
					if before == "" {
						before = start
						if w.val == "-execdir" || w.val == "-okdir" {
							before = "./"
						}
					}
					inner[k] = word{prefix: before, suffix: after, pos: iw.pos, end: iw.end}
				}
			}
			ids = append(ids, s.inner(id, inner, nil, a)...)
		}
		i = end
	}
	return ids
}

// wrapperSpec describes a program that runs its arguments as a command.
type wrapperSpec struct {
	short, value, script        string   // short options: plain, with a value, with a command string
	long, longValue, longScript []string // the same for long options
	operands                    int      // words between the options and the command
	assigns                     bool     // NAME=VALUE words may come before the command
	numeric                     bool     // -N is an option (nice -10)
	tail                        bool     // the command gets more arguments when it runs
	join                        byte     // the words are joined and run by sh -c, unless this option is given
	noCommand                   bool     // the words after the options are not a command
	shell                       string   // short options that make it run a shell when given no command
	longShell                   []string // the same for long options
	alwaysShell                 bool     // it runs a shell when given no command, options or not (su)
}

var wrappers = map[string]wrapperSpec{
	"command": {short: "pvV"},
	"builtin": {},
	"exec":    {short: "cl", value: "a"},
	"env": {short: "i0v", value: "uC", script: "S", assigns: true,
		long:      []string{"ignore-environment", "null", "debug", "list-signal-handling", "block-signal", "default-signal", "ignore-signal"},
		longValue: []string{"unset", "chdir"}, longScript: []string{"split-string"}},
	"nice":   {value: "n", longValue: []string{"adjustment"}, numeric: true},
	"nohup":  {},
	"setsid": {short: "cfw", long: []string{"ctty", "fork", "wait"}},
	"stdbuf": {value: "ioe", longValue: []string{"input", "output", "error"}},
	"time":   {short: "pavq", value: "fo", long: []string{"portability", "append", "verbose", "quiet"}, longValue: []string{"format", "output"}},
	"timeout": {short: "v", value: "sk", long: []string{"foreground", "preserve-status", "verbose"},
		longValue: []string{"signal", "kill-after"}, operands: 1},
	"sudo": {short: "AbEeHiKklnPSsVv", value: "CDghpRrTtUu", shell: "is", longShell: []string{"login", "shell"},
		long:      []string{"askpass", "background", "bell", "preserve-env", "edit", "help", "set-home", "login", "remove-timestamp", "reset-timestamp", "list", "non-interactive", "preserve-groups", "stdin", "shell", "validate", "version"},
		longValue: []string{"close-from", "chdir", "group", "host", "prompt", "chroot", "role", "type", "command-timeout", "other-user", "user"}},
	"doas": {short: "Lns", value: "uC", shell: "s"},
	"su": {short: "lmpfP", value: "sgGw", script: "c", noCommand: true, alwaysShell: true,
		long:      []string{"login", "preserve-environment", "pty", "fast"},
		longValue: []string{"shell", "group", "supp-group", "whitelist-environment"}, longScript: []string{"command", "session-command"}},
	"xargs": {short: "0iloprtx", value: "aEdILnPs", tail: true,
		long:      []string{"null", "interactive", "no-run-if-empty", "verbose", "exit", "open-tty", "show-limits", "eof", "replace", "max-lines"},
		longValue: []string{"arg-file", "delimiter", "max-args", "max-procs", "max-chars", "process-slot-var"}},
	"busybox": {},
	"chroot":  {long: []string{"skip-chdir"}, longValue: []string{"userspec", "groups"}, operands: 1},
	"ionice":  {short: "t", value: "cnpPu"},
	"taskset": {short: "acp", operands: 1, long: []string{"all-tasks", "cpu-list", "pid"}},
	"flock": {short: "sxeunoF", value: "wE", script: "c", operands: 1,
		long:      []string{"shared", "exclusive", "unlock", "nonblock", "nb", "close", "no-fork", "verbose"},
		longValue: []string{"wait", "timeout", "conflict-exit-code"}, longScript: []string{"command"}},
	"watch": {short: "bcdegptwx", value: "nq", join: 'x',
		long:      []string{"beep", "color", "no-color", "differences", "errexit", "chgexit", "precise", "no-title", "no-wrap", "exec", "equexit"},
		longValue: []string{"interval"}},
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// wrapper finds the command a wrapper runs: past its options, its operands, and for env
// its assignments.
func (s *scanner) wrapper(id int, name string, spec wrapperSpec, args []word, redirs []*syntax.Redirect, a at) []int {
	var ids []int
	runsShell, scripted := spec.alwaysShell, false
	undecided := func(format string, v ...any) []int {
		s.cmds[id].why = fmt.Sprintf(format, v...)
		return ids
	}
	script := func(w word, what string) []int {
		scripted = true
		if !w.known {
			return undecided("%s %s with a command string that is not literal", name, what)
		}
		inner := s.innerScript(id, w.val, name+" "+what+" string", a)
		if name == "env" {
			// env -S splits the string itself and execs the first word: no shell, so
			// no builtins either.
			for _, i := range inner {
				s.cmds[i].inShell = false
			}
		} else {
			s.cmds[id].implied = "sh" // su -c, flock -c and watch hand the string to a shell
		}
		return append(ids, inner...)
	}
	joined := spec.join != 0
	i := 0
options:
	for ; i < len(args); i++ {
		w := args[i]
		if !w.known {
			if flagCapable(w) {
				return undecided("%s given a word that is not literal where its options go: cannot tell what it runs", name)
			}
			break
		}
		v := w.val
		switch {
		case v == "--":
			i++
			break options
		case spec.assigns && isAssignment(v) && AssignCode(strings.SplitN(v, "=", 2)[0]) != "":
			return undecided("%s", AssignCode(strings.SplitN(v, "=", 2)[0]))
		case spec.assigns && (v == "-" || isAssignment(v)):
		case spec.numeric && len(v) > 1 && v[0] == '-' && isDigits(v[1:]):
		case strings.HasPrefix(v, "--"):
			long, val, hasVal := strings.Cut(v[2:], "=")
			switch {
			case contains(spec.longScript, long):
				if !hasVal {
					if i++; i >= len(args) {
						return ids
					}
					ids = script(args[i], "--"+long)
				} else {
					ids = script(word{val: val, known: true}, "--"+long)
				}
			case contains(spec.longValue, long):
				if !hasVal {
					i++
				}
			case contains(spec.long, long):
				if spec.join != 0 && long == "exec" {
					joined = false
				}
				runsShell = runsShell || contains(spec.longShell, long)
			default:
				return undecided("%s with the unknown option --%s: cannot tell which command it runs", name, long)
			}
		case len(v) > 1 && v[0] == '-':
		cluster:
			for j := 1; j < len(v); j++ {
				switch ch := v[j]; {
				case strings.IndexByte(spec.short, ch) >= 0:
					if ch == spec.join {
						joined = false
					}
					runsShell = runsShell || strings.IndexByte(spec.shell, ch) >= 0
				case strings.IndexByte(spec.value, ch) >= 0:
					if j == len(v)-1 {
						i++ // the value is the next word
					}
					break cluster
				case strings.IndexByte(spec.script, ch) >= 0:
					if j < len(v)-1 {
						ids = script(word{val: v[j+1:], known: true}, "-"+string(ch))
					} else if i++; i < len(args) {
						ids = script(args[i], "-"+string(ch))
					}
					break cluster
				default:
					return undecided("%s with the unknown option -%c: cannot tell which command it runs", name, ch)
				}
			}
		default:
			break options
		}
		if s.cmds[id].why != "" {
			return ids
		}
	}
	for k := 0; k < spec.operands && i < len(args); k++ {
		if !args[i].known && args[i].split {
			return undecided("%s given a word that is not literal before its command", name)
		}
		i++
	}
	if i >= len(args) || spec.noCommand {
		if spec.tail && i >= len(args) {
			s.cmds[id].implied = "echo" // xargs without a command runs echo
		}
		if runsShell && !scripted {
			// sudo -s, su: a shell, reading its commands from standard input.
			c := s.cmds[id]
			ids = append(ids, s.inner(id, []word{{val: "sh", known: true, pos: c.start, end: c.end}}, redirs, a)...)
		}
		return ids
	}
	rest := args[i:]
	if spec.script != "" && rest[0].known && (rest[0].val == "-"+spec.script[:1] || contains(spec.longScript, strings.TrimPrefix(rest[0].val, "--"))) {
		if len(rest) > 1 {
			return script(rest[1], rest[0].val) // flock FILE -c 'command'
		}
		return ids
	}
	if joined {
		vals := make([]string, len(rest))
		for k, w := range rest {
			if !w.known {
				return undecided("%s with a command that is not literal", name)
			}
			vals[k] = w.val
		}
		return script(word{val: strings.Join(vals, " "), known: true}, "command")
	}
	if spec.tail {
		rest = append(rest[:len(rest):len(rest)], word{split: true})
	}
	return append(ids, s.inner(id, rest, redirs, a)...)
}

func isAssignment(v string) bool {
	eq := strings.IndexByte(v, '=')
	return eq > 0 && !strings.HasPrefix(v, "-")
}

func isDigits(v string) bool {
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return false
		}
	}
	return v != ""
}

// text is a command's text as written, or for an argv its words quoted for a shell.
func (s *scanner) text(i int) string {
	c := &s.cmds[i]
	if c.scope != nil && c.end > c.start && int(c.end) <= len(c.scope.src) {
		return c.scope.src[c.start:c.end]
	}
	parts := make([]string, 0, len(c.words))
	for _, w := range c.words {
		if !w.known {
			parts = append(parts, "…")
			continue
		}
		q, err := syntax.Quote(w.val, syntax.LangBash)
		if err != nil {
			q = strconv.Quote(w.val)
		}
		parts = append(parts, q)
	}
	return strings.Join(parts, " ")
}
