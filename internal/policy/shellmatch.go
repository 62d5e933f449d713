package policy

import (
	"errors"
	"fmt"
	"path"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// tri is a match's certainty. A "maybe" is a match the command's non-literal words could
// complete, and is denied as undecidable.
type tri uint8

const (
	no tri = iota
	maybe
	yes
)

// denyRule is one shell.deny entry: one command pattern, or a pipeline of them.
type denyRule struct {
	src    string
	rule   string // "shell.deny[i]"
	stages []*cmdPattern
}

// cmdPattern is a simple command in a deny pattern.
type cmdPattern struct {
	name     string    // program name, as progName gives it
	flags    []string  // canonical options: letters, and long names not known as letters
	operands []operand // in order; a bare * is dropped (it stands for any arguments)
}

type operand struct {
	value string // literal, or a path.Match pattern when glob
	glob  bool
	clean string // path.Clean(value)
}

// prefixRule is one shell.allow_prefixes entry.
type prefixRule struct {
	src   string
	words []string // the first is the program name, as progName gives it
	allow Decision // the decision on a command that starts with it
}

// flagAliases are options known to be one another for a few programs that deny lists are
// written about: long names and capitals that mean the same as a letter.
var flagAliases = map[string]map[string]string{
	"rm":    {"R": "r", "recursive": "r", "force": "f", "dir": "d", "interactive": "i", "verbose": "v"},
	"cp":    {"R": "r", "recursive": "r", "force": "f", "archive": "a"},
	"mv":    {"force": "f"},
	"chmod": {"recursive": "R"},
	"chown": {"recursive": "R"},
	"chgrp": {"recursive": "R"},
	"git":   {"force": "f"},
}

// argView is a command's arguments sorted for matching, made once per command.
type argView struct {
	flags    []string // canonical options
	longs    []string // long options as written, for abbreviations
	operands []word   // literal non-options, in order
	unknowns []word   // words whose value depends on the run
	anySplit bool
}

func newArgView(name string, args []word) *argView {
	v := &argView{}
	aliases := flagAliases[name]
	endOpts := false
	for _, w := range args {
		switch {
		case !w.known:
			v.unknowns = append(v.unknowns, w)
			v.anySplit = v.anySplit || w.split
		case endOpts || len(w.val) < 2 || w.val[0] != '-':
			v.operands = append(v.operands, w)
		case w.val == "--":
			endOpts = true
		case strings.HasPrefix(w.val, "--"):
			long, _, _ := strings.Cut(w.val[2:], "=")
			v.longs = append(v.longs, long)
			v.flags = append(v.flags, long)
			for full, short := range aliases {
				// GNU tools take any unambiguous abbreviation: --recu is --recursive.
				if long != "" && len(full) > 1 && strings.HasPrefix(full, long) {
					v.flags = append(v.flags, short)
				}
			}
		default:
			for i := 1; i < len(w.val); i++ {
				v.flags = append(v.flags, canonicalFlag(aliases, w.val[i:i+1]))
			}
		}
	}
	return v
}

func canonicalFlag(aliases map[string]string, f string) string {
	if c, ok := aliases[f]; ok {
		return c
	}
	return f
}

func (v *argView) hasFlag(f string) bool {
	for _, g := range v.flags {
		if g == f {
			return true
		}
	}
	if len(f) > 1 {
		for _, l := range v.longs {
			if l != "" && strings.HasPrefix(f, l) {
				return true
			}
		}
	}
	return false
}

// match decides whether a command (its name already known to be literal) matches p.
func (p *cmdPattern) match(name string, v *argView) tri {
	if name != p.name {
		return no
	}
	missingFlags := false
	for _, f := range p.flags {
		if !v.hasFlag(f) {
			missingFlags = true
			break
		}
	}
	next := 0 // operands match as a subsequence; greedy finds one if there is one
	for _, o := range v.operands {
		if next < len(p.operands) && p.operands[next].matches(o) {
			next++
		}
	}
	missing := p.operands[next:]
	if !missingFlags && len(missing) == 0 {
		return yes
	}
	if len(v.unknowns) == 0 {
		return no
	}
	if v.anySplit {
		return maybe
	}
	// Each quoted unknown word is one word: it can stand for the missing options (one
	// cluster) or for one missing operand it is compatible with.
	need, flagWords, able := len(missing), 0, 0
	if missingFlags {
		need++
	}
	for _, u := range v.unknowns {
		asFlag := missingFlags && flagCapable(u)
		asOperand := false
		for _, m := range missing {
			asOperand = asOperand || m.couldBe(u)
		}
		if asFlag {
			flagWords++
		}
		if asFlag || asOperand {
			able++
		}
	}
	if able >= need && (!missingFlags || flagWords > 0) {
		return maybe
	}
	return no
}

// matches reports whether a literal command operand matches the pattern operand.
func (p operand) matches(o word) bool {
	if o.glob {
		// The command's glob could expand to the operand itself, or to entries
		// directly inside it: rm -rf /* is rm -rf / for this purpose.
		if m, _ := path.Match(o.val, p.clean); m {
			return true
		}
		if p.glob {
			// Both are globs: the command's could expand to a name the pattern's matches.
			// Whether two globs meet is not decided here; the same glob counts, and so
			// does the pattern matching the command's glob as written (* meets every
			// glob); two that share no name (*.go, *.txt) do not. A deny rule therefore
			// always denies its own text.
			if o.val == p.value || path.Clean(o.val) == p.clean {
				return true
			}
			m1, _ := path.Match(p.value, o.val)
			m2, _ := path.Match(p.value, path.Clean(o.val))
			return m1 || m2
		}
		return hasMeta(path.Base(o.val)) && path.Dir(path.Clean(o.val)) == p.clean
	}
	if p.glob {
		m1, _ := path.Match(p.value, o.val)
		m2, _ := path.Match(p.value, path.Clean(o.val))
		return m1 || m2
	}
	return o.val == p.value || (o.val != "" && path.Clean(o.val) == p.clean)
}

// couldBe reports whether an unknown (quoted) word could be this operand. Path cleaning
// can undo most of a prefix (/tmp/$X with X=.. is /), but not its being relative, and no
// value makes "$DIR/build" clean to anything whose last element is not build.
func (p operand) couldBe(u word) bool {
	if p.glob || u.glob || u.split {
		return true
	}
	if u.prefix != "" && u.prefix[0] != '/' && strings.HasPrefix(p.value, "/") {
		return false // a relative path never cleans to an absolute one
	}
	last := u.suffix
	slash := strings.LastIndexByte(last, '/')
	last = last[slash+1:]
	if last == "" || last == "." || last == ".." {
		return true
	}
	base := path.Base(p.clean)
	if slash >= 0 {
		return base == last
	}
	return strings.HasSuffix(base, last)
}

// matchPrefix decides whether a command starts with the prefix's words.
func (r *prefixRule) matchPrefix(name string, words []word) tri {
	if name != r.words[0] {
		return no
	}
	for i, want := range r.words[1:] {
		if i+1 >= len(words) {
			return no
		}
		w := words[i+1]
		if !w.known || w.glob {
			return maybe
		}
		if w.val != want {
			return no
		}
	}
	return yes
}

// parsePattern parses a deny pattern or an allow prefix into its simple commands.
func parsePattern(src string) ([]*syntax.CallExpr, error) {
	if strings.TrimSpace(src) == "" {
		return nil, errors.New("empty pattern")
	}
	f, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(src), "")
	if err != nil {
		return nil, fmt.Errorf("does not parse as shell: %v", err)
	}
	if len(f.Stmts) != 1 {
		return nil, errors.New("want one command or one pipeline (a | b), not a list")
	}
	var calls []*syntax.CallExpr
	var stage func(st *syntax.Stmt) error
	stage = func(st *syntax.Stmt) error {
		if st.Negated || st.Background || st.Coprocess || len(st.Redirs) > 0 {
			return errors.New("redirections, !, & and |& are not part of a pattern: want a command or a pipeline")
		}
		switch c := st.Cmd.(type) {
		case *syntax.CallExpr:
			if len(c.Assigns) > 0 || len(c.Args) == 0 {
				return errors.New("assignments are not part of a pattern: want a command")
			}
			calls = append(calls, c)
			return nil
		case *syntax.BinaryCmd:
			if c.Op != syntax.Pipe && c.Op != syntax.PipeAll {
				return fmt.Errorf("want one command or one pipeline (a | b), not a list with %s", c.Op)
			}
			if err := stage(c.X); err != nil {
				return err
			}
			return stage(c.Y)
		}
		return errors.New("want a simple command or a pipeline of them, not a compound command")
	}
	if err := stage(f.Stmts[0]); err != nil {
		return nil, err
	}
	return calls, nil
}

// patternWords evaluates a pattern's words, which must all be literal.
func patternWords(c *syntax.CallExpr) ([]word, error) {
	var ws []word
	for _, a := range c.Args {
		ws = appendWords(ws, a)
	}
	for _, w := range ws {
		if !w.known {
			return nil, errors.New("words must be literal: no $…, `…`, ~ or $'…'")
		}
	}
	if ws[0].glob || ws[0].val == "" || progName(ws[0].val) == "" {
		return nil, fmt.Errorf("the program name %q must be a literal name, not a glob", ws[0].val)
	}
	return ws, nil
}

func compileDeny(src string) (denyRule, error) {
	calls, err := parsePattern(src)
	if err != nil {
		return denyRule{}, err
	}
	r := denyRule{src: src}
	for _, c := range calls {
		ws, err := patternWords(c)
		if err != nil {
			return denyRule{}, err
		}
		p := &cmdPattern{name: progName(ws[0].val)}
		aliases := flagAliases[p.name]
		endOpts := false
		for _, w := range ws[1:] {
			switch {
			case !endOpts && w.val == "--":
				endOpts = true
			case !endOpts && len(w.val) > 1 && w.val[0] == '-':
				if w.glob {
					return denyRule{}, fmt.Errorf("option %q must be literal, not a glob", w.val)
				}
				if long, ok := strings.CutPrefix(w.val, "--"); ok {
					long, _, _ = strings.Cut(long, "=")
					p.flags = append(p.flags, canonicalFlag(aliases, long))
					continue
				}
				for i := 1; i < len(w.val); i++ {
					p.flags = append(p.flags, canonicalFlag(aliases, w.val[i:i+1]))
				}
			case w.glob && w.val == "*":
				// any arguments, none included
			default:
				if w.glob {
					if _, err := path.Match(w.val, ""); err != nil {
						return denyRule{}, fmt.Errorf("invalid glob %q: %v", w.val, err)
					}
				}
				p.operands = append(p.operands, operand{value: w.val, glob: w.glob, clean: path.Clean(w.val)})
			}
		}
		r.stages = append(r.stages, p)
	}
	return r, nil
}

func compilePrefix(src string) (prefixRule, error) {
	calls, err := parsePattern(src)
	if err != nil {
		return prefixRule{}, err
	}
	if len(calls) != 1 {
		return prefixRule{}, errors.New("want the first words of one command, not a pipeline")
	}
	ws, err := patternWords(calls[0])
	if err != nil {
		return prefixRule{}, err
	}
	r := prefixRule{src: src, words: []string{progName(ws[0].val)}}
	for _, w := range ws[1:] {
		if w.glob {
			return prefixRule{}, fmt.Errorf("%q: prefixes are literal words, not globs", w.val)
		}
		r.words = append(r.words, w.val)
	}
	return r, nil
}
