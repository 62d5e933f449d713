package policy

import (
	"math"
	"path"
	"strconv"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// word is one shell word as the engine sees it: after quote removal and brace expansion,
// before anything that depends on the run (parameters, substitutions, globbing).
type word struct {
	// val is the value after quote removal. For a glob it is the pattern, with quoted
	// metacharacters escaped so path.Match reads them literally.
	val string
	// known is true when the value does not depend on the run.
	known bool
	// glob is true when unquoted * ? […] or an extglob make the shell match the word
	// against file names.
	glob bool
	// split is true for an unknown word that may become any number of words: an
	// unquoted expansion, "$@", "${a[@]}".
	split bool
	// prefix and suffix are the literal text before the first and after the last
	// unknown part of an unknown word.
	prefix, suffix string
	// pos and end are the word's offsets in the source it was parsed from.
	pos, end uint
}

// maxBraceWords bounds brace expansion: {1..100000} is not a command anyone needs
// decided word by word, and would cost memory to expand.
const maxBraceWords = 64

// appendWords appends the words the shell would make of one parsed word: one, or more
// through brace expansion.
func appendWords(dst []word, w *syntax.Word) []word {
	if len(w.Parts) == 0 {
		return append(dst, word{known: true})
	}
	pos, end := w.Pos().Offset(), w.End().Offset()
	if lit, ok := w.Parts[0].(*syntax.Lit); ok && len(w.Parts) == 1 && plainLit(lit.Value) {
		return append(dst, word{val: lit.Value, known: true, pos: pos, end: end}) // the usual case
	}
	if mayBrace(w) {
		vals, ok := braceWords(w)
		if !ok {
			// Braces mixed with quotes or expansions: what the words will be is not
			// decided here.
			return append(dst, word{split: true, pos: pos, end: end})
		}
		for _, v := range vals {
			e := evaluator{}
			e.unquoted(v, true)
			dst = append(dst, e.finish(pos, end))
		}
		return dst
	}
	return append(dst, evalWord(w, pos, end))
}

// plainLit reports whether an unquoted literal is its own value: no escapes, globs,
// braces or tilde.
func plainLit(v string) bool {
	for i := 0; i < len(v); i++ {
		switch v[i] {
		case '\\', '*', '?', '[', '{', '~':
			return false
		}
	}
	return true
}

func evalWord(w *syntax.Word, pos, end uint) word {
	e := evaluator{}
	e.parts(w.Parts)
	if e.glob && e.litMeta {
		// A quoted metacharacter next to an unquoted one: evaluate again, escaping the
		// quoted ones, so the pattern means what the shell would match.
		e = evaluator{pattern: true}
		e.parts(w.Parts)
	}
	return e.finish(pos, end)
}

type evaluator struct {
	b       strings.Builder
	pattern bool // escape quoted metacharacters in b
	unknown bool
	split   bool
	glob    bool
	extglob bool
	litMeta bool // a quoted or escaped * ? [ \ was written
	prefix  string
	started bool // a part has been evaluated (tilde expansion is only at the start)
}

func (e *evaluator) finish(pos, end uint) word {
	w := word{pos: pos, end: end}
	if e.unknown {
		w.split, w.prefix, w.suffix, w.glob = e.split, e.prefix, e.b.String(), e.glob
		return w
	}
	w.known, w.val = true, e.b.String()
	if e.glob && !e.extglob {
		// An unmatched [ is literal to the shell ([ -f x ] is the test command); a * or ?
		// next to it still is not.
		if _, err := path.Match(w.val, ""); err != nil {
			e.glob = strings.ContainsAny(w.val, "*?")
		}
	}
	w.glob = e.glob
	return w
}

// unknownPart records a part whose value depends on the run.
func (e *evaluator) unknownPart(split bool) {
	if !e.unknown {
		e.prefix = e.b.String()
	}
	e.unknown, e.split = true, e.split || split
	e.b.Reset()
}

func (e *evaluator) parts(parts []syntax.WordPart) {
	for _, part := range parts {
		switch p := part.(type) {
		case *syntax.Lit:
			e.unquoted(p.Value, !e.started)
		case *syntax.SglQuoted:
			if p.Dollar {
				e.unknownPart(false) // $'…' escapes: not worth decoding, so not literal
			} else {
				e.quoted(p.Value)
			}
		case *syntax.DblQuoted:
			for _, dp := range p.Parts {
				switch dp := dp.(type) {
				case *syntax.Lit:
					e.quoted(unescape(dp.Value, doubleQuoteEscapes))
				case *syntax.ParamExp:
					e.unknownPart(multiField(dp))
				default:
					e.unknownPart(false)
				}
			}
		case *syntax.ExtGlob:
			e.glob, e.extglob = true, true
			e.b.WriteString(p.Op.String() + p.Pattern.Value + ")")
		case *syntax.ProcSubst:
			e.b.WriteString("/dev/fd/") // a path, never an option
			e.unknownPart(false)
		default: // parameter, command and arithmetic expansions, unquoted: split too
			e.unknownPart(true)
		}
		e.started = true
	}
}

// multiField reports whether a parameter expansion makes several words even in quotes.
func multiField(p *syntax.ParamExp) bool {
	if p.Names != 0 || (p.Param != nil && p.Param.Value == "@") {
		return true
	}
	if idx, ok := p.Index.(*syntax.Word); ok {
		lit := idx.Lit()
		return lit == "@"
	}
	return false
}

// quoted writes text that is literal whatever it holds.
func (e *evaluator) quoted(s string) {
	for i := 0; i < len(s); i++ {
		e.quotedByte(s[i])
	}
}

func (e *evaluator) quotedByte(c byte) {
	switch c {
	case '*', '?', '[', '\\':
		e.litMeta = true
		if e.pattern {
			e.b.WriteByte('\\')
		}
	}
	e.b.WriteByte(c)
}

// unquoted writes an unquoted literal: backslashes escape, glob characters are live, and
// a leading ~ is a home directory, known only at run time.
func (e *evaluator) unquoted(s string, start bool) {
	i := 0
	if start && strings.HasPrefix(s, "~") {
		e.unknownPart(false)
		i = strings.IndexByte(s, '/')
		if i < 0 {
			return
		}
	}
	for ; i < len(s); i++ {
		switch c := s[i]; c {
		case '\\':
			if i+1 < len(s) {
				i++
				e.quotedByte(s[i])
			} else {
				e.quotedByte(c)
			}
		case '*', '?', '[':
			e.glob = true
			e.b.WriteByte(c)
		default:
			e.b.WriteByte(c)
		}
	}
}

// The characters a backslash escapes inside double quotes, and in an unquoted
// here-document (where a double quote is an ordinary character); before a newline, the
// backslash and the newline both go.
const (
	doubleQuoteEscapes = "$`\"\\"
	heredocEscapes     = "$`\\"
)

// unescape removes the backslashes that escape one of escapable, or a newline.
func unescape(s, escapable string) string {
	if strings.IndexByte(s, '\\') < 0 {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			switch c := s[i+1]; {
			case c == '\n':
				i++
				continue
			case strings.IndexByte(escapable, c) >= 0:
				i++
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// mayBrace reports whether a word may undergo brace expansion: an unquoted { with a , or
// .. and a } after it.
func mayBrace(w *syntax.Word) bool {
	open, sep := false, false
	for _, part := range w.Parts {
		lit, ok := part.(*syntax.Lit)
		if !ok {
			continue
		}
		v := lit.Value
		for i := 0; i < len(v); i++ {
			switch v[i] {
			case '\\':
				i++
			case '{':
				open = true
			case ',':
				sep = sep || open
			case '.':
				sep = sep || (open && i+1 < len(v) && v[i+1] == '.')
			case '}':
				if open && sep {
					return true
				}
			}
		}
	}
	return false
}

// braceWords expands the braces of a word made only of unquoted literals without
// backslashes; ok is false for any other word, or one that expands to too many words.
func braceWords(w *syntax.Word) ([]string, bool) {
	for _, part := range w.Parts {
		lit, ok := part.(*syntax.Lit)
		if !ok || strings.IndexByte(lit.Value, '\\') >= 0 {
			return nil, false
		}
	}
	cp := *w
	syntax.SplitBraces(&cp)
	return expandBraces(&cp)
}

func expandBraces(w *syntax.Word) ([]string, bool) {
	out := []string{""}
	for _, part := range w.Parts {
		var alts []string
		switch p := part.(type) {
		case *syntax.Lit:
			alts = []string{p.Value}
		case *syntax.BraceExp:
			var ok bool
			if p.Sequence {
				alts, ok = braceSequence(p)
			} else {
				for _, el := range p.Elems {
					sub, ok := expandBraces(el)
					if !ok || len(alts)+len(sub) > maxBraceWords {
						return nil, false
					}
					alts = append(alts, sub...)
				}
				ok = true
			}
			if !ok {
				return nil, false
			}
		default:
			return nil, false
		}
		if len(out)*len(alts) > maxBraceWords {
			return nil, false
		}
		next := make([]string, 0, len(out)*len(alts))
		for _, o := range out {
			for _, a := range alts {
				next = append(next, o+a)
			}
		}
		out = next
	}
	return out, true
}

// braceSequence expands {a..e} and {1..10..2}. It counts before it expands, in unsigned
// arithmetic, so {-9223372036854775808..9223372036854775807} is refused, not looped over.
func braceSequence(p *syntax.BraceExp) ([]string, bool) {
	from, to := p.Elems[0].Lit(), p.Elems[1].Lit()
	incr := uint64(1)
	if len(p.Elems) > 2 {
		n, err := strconv.ParseInt(p.Elems[2].Lit(), 10, 64)
		if err != nil || n == math.MinInt64 {
			return nil, false
		}
		if n < 0 {
			n = -n
		}
		if n != 0 {
			incr = uint64(n)
		}
	}
	a, err1 := strconv.ParseInt(from, 10, 64)
	b, err2 := strconv.ParseInt(to, 10, 64)
	chars := err1 != nil || err2 != nil
	if chars {
		if len(from) != 1 || len(to) != 1 {
			return nil, false
		}
		a, b = int64(from[0]), int64(to[0])
	}
	up := b >= a
	diff := uint64(a) - uint64(b)
	if up {
		diff = uint64(b) - uint64(a)
	}
	count := diff/incr + 1
	if count > maxBraceWords {
		return nil, false
	}
	out := make([]string, 0, count)
	for k := range count {
		v := int64(uint64(a) - k*incr)
		if up {
			v = int64(uint64(a) + k*incr)
		}
		if chars {
			out = append(out, string(rune(v)))
		} else {
			out = append(out, strconv.FormatInt(v, 10))
		}
	}
	return out, true
}

// shells are the programs that read shell code; a rule about one is about all of them.
var shells = map[string]bool{
	"sh": true, "bash": true, "dash": true, "zsh": true, "ksh": true, "ash": true, "mksh": true,
	"yash": true, "posh": true, "rbash": true, "ksh93": true, "pdksh": true, "lksh": true, "oksh": true,
}

// progName is the name a command is known by: its base name, all shells being "sh".
func progName(v string) string {
	v = v[strings.LastIndexByte(v, '/')+1:]
	if shells[v] {
		return "sh"
	}
	return v
}

// flagCapable reports whether an unknown word could turn out to be an option.
func flagCapable(w word) bool {
	return w.split || w.prefix == "" || strings.HasPrefix(w.prefix, "-")
}

func hasMeta(s string) bool { return strings.ContainsAny(s, "*?[") }
