package policy

import (
	"errors"
	"fmt"
	"path"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/wire"
)

// Op is a file operation.
type Op uint8

const (
	// Read opens a file for reading or lists a directory.
	Read Op = iota + 1
	// Write changes an existing file.
	Write
	// Create makes a new file.
	Create
	// Delete removes a file or directory.
	Delete
	// Mkdir makes a directory: deny_write applies, extensions and sizes do not.
	Mkdir
)

func (o Op) String() string {
	switch o {
	case Read:
		return "read"
	case Write:
		return "write"
	case Create:
		return "create"
	case Delete:
		return "delete"
	case Mkdir:
		return "mkdir"
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// MaxPath is the longest path File decides (Linux's PATH_MAX).
const MaxPath = 4096

// maxGlobSegments bounds a deny_write pattern, whose matcher keeps a bit per segment.
const maxGlobSegments = 63

type fileRules struct {
	set        bool
	jail       string
	denyWrite  []writeRule
	extensions []string
	maxSize    int64
	inside     string // the reason an allowed path is given
}

// writeRule is one deny_write glob, as segments relative to the jail.
type writeRule struct {
	src      string
	segs     []string
	anchored bool
}

func (f *fileRules) summary() string {
	if !f.set {
		return "files: no rules"
	}
	s := "files: jail " + f.jail
	if len(f.denyWrite) > 0 {
		s += ", " + plural(len(f.denyWrite), "deny_write pattern", "deny_write patterns")
	}
	if len(f.extensions) > 0 {
		s += ", extensions " + strings.Join(f.extensions, " ")
	}
	if f.maxSize > 0 {
		s += ", max file size " + wire.Size(f.maxSize).String()
	}
	return s
}

func (l *loader) files(key, n *yaml.Node, f *fileRules) error {
	if isNull(n) {
		return nil
	}
	var jailNode, denyNode *yaml.Node
	err := l.mapping(n, "files", []string{"jail", "deny_write", "allowed_extensions", "max_file_size"}, func(k string, _, v *yaml.Node) error {
		field := "files." + k
		switch k {
		case "jail":
			jail, err := l.str(v, field)
			if err != nil {
				return err
			}
			if !path.IsAbs(jail) {
				return l.errf(v, field, "%q is not an absolute path", jail)
			}
			f.jail, jailNode = path.Clean(jail), v
		case "deny_write":
			denyNode = v
		case "allowed_extensions":
			items, err := l.list(v, field)
			if err != nil {
				return err
			}
			for _, it := range items {
				if msg := badExtension(it.value); msg != "" {
					return l.errf(it.node, it.field, "%q %s", it.value, msg)
				}
				f.extensions = append(f.extensions, it.value)
			}
		case "max_file_size":
			size, err := l.size(v, field)
			if err != nil {
				return err
			}
			if size <= 0 {
				return l.errf(v, field, "must be more than 0 (leave it out for no limit)")
			}
			f.maxSize = size
		}
		return nil
	})
	if err != nil {
		return err
	}
	if jailNode == nil {
		return l.errf(key, "files.jail", "required: file rules are decided inside a jail directory")
	}
	items, err := l.list(denyNode, "files.deny_write")
	if err != nil {
		return err
	}
	for _, it := range items {
		r, err := compileWriteRule(f.jail, it.value)
		if err != nil {
			return l.errf(it.node, it.field, "%v", err)
		}
		f.denyWrite = append(f.denyWrite, r)
	}
	f.set = true
	f.inside = "inside the jail " + f.jail + ", and no file rule denies it"
	return nil
}

func badExtension(e string) string {
	switch {
	case !strings.HasPrefix(e, "."):
		return "must start with a dot, like \".ts\""
	case len(e) < 2:
		return "is only a dot"
	case strings.ContainsAny(e, "/*?[\\"):
		return "must be a plain extension: no /, no glob characters"
	case strings.IndexFunc(e, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0:
		return "holds a space or control character"
	}
	return ""
}

func compileWriteRule(jail, src string) (writeRule, error) {
	r := writeRule{src: src}
	p := strings.TrimSuffix(src, "/")
	switch {
	case p == "":
		return r, errors.New("empty pattern")
	case path.IsAbs(p):
		c := path.Clean(p)
		switch {
		case c == jail:
			p = "**"
		case jail == "/":
			p = c[1:]
		case strings.HasPrefix(c, jail+"/"):
			p = c[len(jail)+1:]
		default:
			return r, fmt.Errorf("%q is outside the jail %s; patterns are relative to the jail", src, jail)
		}
		r.anchored = true
	default:
		r.anchored = strings.Contains(p, "/")
	}
	for _, seg := range strings.Split(p, "/") {
		switch seg {
		case "..":
			return r, fmt.Errorf("%q climbs out of the jail with a \"..\" segment", src)
		case ".", "":
			continue
		case "**":
			if len(r.segs) > 0 && r.segs[len(r.segs)-1] == "**" {
				continue
			}
		default:
			if _, err := path.Match(seg, ""); err != nil {
				return r, fmt.Errorf("invalid glob %q: %v", src, err)
			}
		}
		r.segs = append(r.segs, seg)
	}
	if len(r.segs) == 0 {
		return r, fmt.Errorf("%q names the jail itself; use ** to protect everything in it", src)
	}
	if !r.anchored && r.segs[0] != "**" {
		r.segs = append([]string{"**"}, r.segs...)
	}
	if len(r.segs) > maxGlobSegments {
		return r, fmt.Errorf("%q has more than %d segments", src, maxGlobSegments)
	}
	return r, nil
}

// closure adds, for every live ** state, the state after it: ** matches zero segments.
func (r *writeRule) closure(states uint64) uint64 {
	for j, seg := range r.segs {
		if states&(1<<j) != 0 && seg == "**" {
			states |= 1 << (j + 1)
		}
	}
	return states
}

func (r *writeRule) step(states uint64, seg string) uint64 {
	var next uint64
	for j, p := range r.segs {
		if states&(1<<j) == 0 {
			continue
		}
		if p == "**" {
			next |= 1 << j
		} else if ok, _ := path.Match(p, seg); ok {
			next |= 1 << (j + 1)
		}
	}
	return r.closure(next)
}

// protects reports whether the rule covers rel (a path relative to the jail, not empty):
// the pattern matches rel or one of its parent directories. For a delete it also covers
// the parents of what an anchored pattern could match.
func (r *writeRule) protects(rel string, op Op) bool {
	done := uint64(1) << len(r.segs)
	states := r.closure(1)
	for rest := rel; ; {
		seg, tail, more := strings.Cut(rest, "/")
		if states = r.step(states, seg); states&done != 0 {
			return true
		}
		if states == 0 {
			return false
		}
		if !more {
			break
		}
		rest = tail
	}
	return op == Delete && r.anchored && r.segs[0] != "**"
}

// Resolve cleans name and resolves it against the jail, returning the absolute path File
// decides on. It does not touch the file system: symbolic links are for the caller to
// resolve (and to not follow) where the action happens.
func (p *Policy) Resolve(name string) (string, error) {
	full, why, outside := p.resolve(name)
	switch {
	case outside:
		return "", fmt.Errorf("%s: %w", why, errdefs.ErrPermissionDenied)
	case why != "":
		return "", fmt.Errorf("%s: %w", why, errdefs.ErrInvalidArgument)
	}
	return full, nil
}

// resolve is Resolve with the reason a path is refused, and whether it is for being
// outside the jail.
func (p *Policy) resolve(name string) (full, why string, outside bool) {
	jail := p.files.jail
	if jail == "" {
		jail = "/"
	}
	switch {
	case name == "":
		return "", "empty path", false
	case strings.IndexByte(name, 0) >= 0:
		return "", fmt.Sprintf("path %q holds a NUL byte", name), false
	case len(name) > MaxPath:
		return "", fmt.Sprintf("path is %d bytes, over %d", len(name), MaxPath), false
	}
	if name[0] == '/' {
		full = path.Clean(name)
	} else {
		full = path.Clean(jail + "/" + name)
	}
	if jail != "/" && full != jail && !(strings.HasPrefix(full, jail) && full[len(jail)] == '/') {
		return "", fmt.Sprintf("%q resolves to %s, outside the jail %s", name, full, jail), true
	}
	return full, "", false
}

// File decides op on the file at name (relative to the jail, or absolute), whose size
// after a Write or Create is size bytes. The decision is on the path as given, cleaned;
// see the package documentation for who resolves symbolic links.
func (p *Policy) File(op Op, name string, size int64) Decision {
	if op < Read || op > Mkdir {
		return deny("files", "unknown operation %s", op)
	}
	full, why, outside := p.resolve(name)
	switch {
	case outside:
		return deny("files.jail", "%s %s", op, why)
	case why != "":
		return deny("files", "%s: %s", op, why)
	}
	f := &p.files
	if !f.set {
		return allow("files", "no file rules")
	}
	if op == Read {
		return Decision{Allow: true, Rule: "files.jail", Reason: f.inside}
	}
	rel := strings.TrimPrefix(strings.TrimPrefix(full, f.jail), "/")
	if rel == "" {
		return deny("files.jail", "%s of the jail %s itself", op, f.jail)
	}
	for i := range f.denyWrite {
		if r := &f.denyWrite[i]; r.protects(rel, op) {
			return deny(fmt.Sprintf("files.deny_write[%d]", i), "%s %s: protected by %q", op, rel, r.src)
		}
	}
	if op != Write && op != Create {
		return Decision{Allow: true, Rule: "files.jail", Reason: f.inside}
	}
	if len(f.extensions) > 0 && !hasExtension(rel, f.extensions) {
		return deny("files.allowed_extensions", "%s %s: the name does not end in %s", op, rel, strings.Join(f.extensions, ", "))
	}
	if f.maxSize > 0 && size < 0 {
		return deny("files.max_file_size", "%s %s: the size is not known (%d), and the limit is %s", op, rel, size, wire.Size(f.maxSize).String())
	}
	if f.maxSize > 0 && size > f.maxSize {
		return deny("files.max_file_size", "%s %s: %d bytes is over the limit of %s", op, rel, size, wire.Size(f.maxSize).String())
	}
	return Decision{Allow: true, Rule: "files.jail", Reason: f.inside}
}

func hasExtension(rel string, exts []string) bool {
	base := rel[strings.LastIndexByte(rel, '/')+1:]
	for _, e := range exts {
		if strings.HasSuffix(base, e) {
			return true
		}
	}
	return false
}
