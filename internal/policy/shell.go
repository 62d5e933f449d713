package policy

import (
	"fmt"
	"strings"
	"sync"

	"go.yaml.in/yaml/v3"
	"mvdan.cc/sh/v3/syntax"
)

// shellRules are the shell section: deny patterns and allow prefixes.
type shellRules struct {
	deny     []denyRule
	prefixes []prefixRule
	// interactive is shell.interactive: allow; see Policy.Interactive.
	interactive bool
	// env is shell.env: the names, besides the safe set, a gated exec may set (GatedEnv).
	env []string
}

func (r *shellRules) active() bool { return len(r.deny) > 0 || len(r.prefixes) > 0 }

func (r *shellRules) summary() string {
	if !r.active() {
		return "shell: no rules"
	}
	s := "shell: " + plural(len(r.deny), "deny pattern", "deny patterns")
	if len(r.prefixes) > 0 {
		s += ", " + plural(len(r.prefixes), "allowed prefix", "allowed prefixes")
	}
	return s
}

func (l *loader) shell(n *yaml.Node, r *shellRules) error {
	return l.mapping(n, "shell", []string{"deny", "allow_prefixes", "interactive", "env"}, func(key string, _, v *yaml.Node) error {
		if key == "env" {
			return l.envNames(v, r)
		}
		if key == "interactive" {
			s, err := l.str(v, "shell.interactive")
			if err != nil || (s != "allow" && s != "deny") {
				return l.errf(v, "shell.interactive", "want allow or deny, got %s", describe(v))
			}
			r.interactive = s == "allow"
			return nil
		}
		items, err := l.list(v, "shell."+key)
		if err != nil {
			return err
		}
		for _, it := range items {
			if key == "deny" {
				rule, err := compileDeny(it.value)
				if err != nil {
					return l.errf(it.node, it.field, "%q: %v", it.value, err)
				}
				rule.rule = it.field
				r.deny = append(r.deny, rule)
				continue
			}
			rule, err := compilePrefix(it.value)
			if err != nil {
				return l.errf(it.node, it.field, "%q: %v", it.value, err)
			}
			rule.allow = allow(it.field, "starts with %q", it.value)
			r.prefixes = append(r.prefixes, rule)
		}
		return nil
	})
}

// envNames reads shell.env.
func (l *loader) envNames(n *yaml.Node, r *shellRules) error {
	items, err := l.list(n, "shell.env")
	if err != nil {
		return err
	}
	for _, it := range items {
		if err := checkEnvName(it.value); err != nil {
			return l.errf(it.node, it.field, "%v", err)
		}
		r.env = append(r.env, it.value)
	}
	return nil
}

// CommandDecision is the decision on one simple command found in a script or argv.
type CommandDecision struct {
	// Command is the command's text as written; for an argv, its words quoted for a
	// shell.
	Command string
	Decision
}

// Shell decides an exec argv: argv[0] runs with the other words as its arguments, with
// no shell in between (a word like "*" is literal). What argv runs in turn (sh -c
// strings, wrappers) is decided too. See the package documentation for the rules.
func (p *Policy) Shell(argv []string) Decision {
	if !p.shell.active() {
		return noShellRules
	}
	return p.aggregate(p.ExplainShell(argv))
}

// ShellScript decides a shell script (one command line or many), parsed as bash.
func (p *Policy) ShellScript(src string) Decision {
	if !p.shell.active() {
		return noShellRules
	}
	s := scanners.Get().(*scanner)
	defer s.release()
	if _, err := s.script(src, at{}); err != nil {
		return deny("shell", "the script does not parse: %v", err)
	}
	var d Decision
	worst, at := Decision{Allow: true}, -1
	for i := range s.cmds {
		if d = p.decide(s, i); !d.Allow && (worst.Allow || severity(d) > severity(worst)) {
			worst, at = d, i
		}
	}
	switch {
	case at >= 0:
		worst.Reason = quoteCommand(s.text(at)) + ": " + worst.Reason
		return worst
	case s.overflow:
		return tooMany
	case len(s.cmds) == 1:
		return d
	}
	return p.allowed(len(s.cmds))
}

// ExplainShell is Shell command by command: the decision on each command argv runs.
func (p *Policy) ExplainShell(argv []string) []CommandDecision {
	for i, a := range argv {
		if strings.IndexByte(a, 0) >= 0 {
			return []CommandDecision{{Command: strings.Join(argv, " "), Decision: p.orNoRules(deny("shell", "argument %d holds a NUL byte, which no program can be given", i))}}
		}
	}
	if len(argv) == 0 {
		return []CommandDecision{{Decision: p.orNoRules(deny("shell", "an empty argv runs nothing"))}}
	}
	s := scanners.Get().(*scanner)
	defer s.release()
	s.argv(argv)
	return p.explain(s)
}

// ExplainScript is ShellScript command by command: the decision on every simple command
// in the script, in the order they were found.
func (p *Policy) ExplainScript(src string) []CommandDecision {
	s := scanners.Get().(*scanner)
	defer s.release()
	if _, err := s.script(src, at{}); err != nil {
		return []CommandDecision{{Command: src, Decision: p.orNoRules(deny("shell", "the script does not parse: %v", err))}}
	}
	return p.explain(s)
}

var (
	noShellRules  = allow("shell", "no shell rules")
	noDenyMatches = allow("shell.deny", "no deny rule matches")
)

func (p *Policy) orNoRules(d Decision) Decision {
	if !p.shell.active() {
		return noShellRules
	}
	return d
}

func (p *Policy) explain(s *scanner) []CommandDecision {
	out := make([]CommandDecision, 0, len(s.cmds)+1)
	for i := range s.cmds {
		out = append(out, CommandDecision{Command: s.text(i), Decision: p.orNoRules(p.decide(s, i))})
	}
	if s.overflow {
		out = append(out, CommandDecision{Command: "…", Decision: p.orNoRules(tooMany)})
	}
	return out
}

var tooMany = deny("shell", "more than %d commands in one decision", maxCommands)

func (p *Policy) aggregate(ds []CommandDecision) Decision {
	worst := -1
	for i, d := range ds {
		if !d.Allow && (worst < 0 || severity(d.Decision) > severity(ds[worst].Decision)) {
			worst = i
		}
	}
	switch {
	case worst >= 0:
		d := ds[worst].Decision
		d.Reason = quoteCommand(ds[worst].Command) + ": " + d.Reason
		return d
	case len(ds) == 1:
		return ds[0].Decision
	}
	return p.allowed(len(ds))
}

// severity orders denials, so a script's decision names the most telling one: a deny
// pattern first, then what cannot be decided, then what is not on the allow list.
// Among equals, the first command found wins.
func severity(d Decision) int {
	switch {
	case strings.HasPrefix(d.Rule, "shell.deny["):
		return 2
	case d.Rule == "shell":
		return 1
	}
	return 0
}

func (p *Policy) allowed(n int) Decision {
	rule := "shell.deny"
	if len(p.shell.prefixes) > 0 {
		rule = "shell.allow_prefixes"
	}
	if n == 0 {
		return allow(rule, "no commands")
	}
	if len(p.shell.prefixes) > 0 {
		return Decision{Allow: true, Rule: rule, Reason: plural(n, "command", "commands") + ", each on the allow list"}
	}
	return Decision{Allow: true, Rule: rule, Reason: "no deny rule matches any of " + plural(n, "command", "commands")}
}

// quoteCommand quotes a command for a reason, cut short: reasons go to audit logs.
func quoteCommand(s string) string {
	const max = 200
	if len(s) > max {
		s = s[:max] + "…"
	}
	return fmt.Sprintf("%q", s)
}

// decide is the decision on one command: undecidable first, then deny patterns in order,
// then allow prefixes.
func (p *Policy) decide(s *scanner, i int) Decision {
	c := &s.cmds[i]
	if c.why != "" {
		return deny("shell", "cannot be decided before it runs: %s", c.why)
	}
	for ri := range p.shell.deny {
		r := &p.shell.deny[ri]
		var t tri
		if len(r.stages) == 1 {
			t = s.match(r.stages[0], i)
		} else {
			t = s.pipeReach(p.shell.deny, ri)[i]
		}
		switch t {
		case yes:
			return deny(r.rule, "matches %q", r.src)
		case maybe:
			return deny(r.rule, "cannot be decided before it runs: its arguments are not all literal, and could make it match %q", r.src)
		}
	}
	if len(p.shell.prefixes) == 0 {
		return noDenyMatches
	}
	undecided := false
	for pi := range p.shell.prefixes {
		switch p.shell.prefixes[pi].matchPrefix(c.name, c.words) {
		case yes:
			return p.shell.prefixes[pi].allow
		case maybe:
			undecided = true
		}
	}
	if undecided {
		return deny("shell.allow_prefixes", "cannot be decided before it runs: words compared with an allowed prefix are not literal")
	}
	return deny("shell.allow_prefixes", "%q is not on the allow list", c.name)
}

// match is p.match on command i, whose arguments are sorted once.
func (s *scanner) match(p *cmdPattern, i int) tri {
	c := &s.cmds[i]
	if c.name != p.name || c.why != "" {
		return no
	}
	if c.view == nil {
		c.view = newArgView(c.name, c.words[1:])
	}
	return p.match(c.name, c.view)
}

// pipeReach computes, for a pipeline rule, how surely each command ends a chain of
// commands feeding one another that matches the rule's stages.
func (s *scanner) pipeReach(rules []denyRule, ri int) []tri {
	if len(s.reach) < len(rules) {
		s.reach = append(s.reach, make([][]tri, len(rules)-len(s.reach))...)
	}
	if s.reach[ri] != nil {
		return s.reach[ri]
	}
	n := len(s.cmds)
	prev := make([]tri, n)
	for i := range n {
		prev[i] = s.match(rules[ri].stages[0], i)
	}
	for _, stage := range rules[ri].stages[1:] {
		cur := make([]tri, n)
		for j := range n {
			m := s.match(stage, j)
			if m == no {
				continue
			}
			best := no
			for i := range n {
				if prev[i] > best && i != j && s.feeds(i, j) {
					best = prev[i]
				}
			}
			cur[j] = min(m, best)
		}
		prev = cur
	}
	s.reach[ri] = prev
	return prev
}

var scanners = sync.Pool{New: func() any {
	return &scanner{parser: syntax.NewParser(syntax.Variant(syntax.LangBash))}
}}

func (s *scanner) release() {
	s.reset()
	scanners.Put(s)
}
