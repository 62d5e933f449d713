package policy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/wire"
)

// MaxFileSize is the largest policy file Load reads. A policy is a page of rules; a
// larger file is a mistake or an attack on the loader.
const MaxFileSize = 1 << 20

// LoadError is a policy file that could not be loaded. It names the line and the field so
// a person can go straight to the mistake; errors.Is(err, errdefs.ErrInvalidArgument) holds.
type LoadError struct {
	// Source is the name given to Load, usually the file's path.
	Source string
	// Line is 1-based; 0 when the error is about the file as a whole.
	Line int
	// Field is the path of the field, like "files.deny_write[2]"; "" for the whole file.
	Field string
	// Msg says what is wrong and, where it helps, what would be right.
	Msg string
}

func (e *LoadError) Error() string {
	var b strings.Builder
	b.WriteString(e.Source)
	if e.Line > 0 {
		b.WriteString(":" + strconv.Itoa(e.Line))
	}
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString(e.Field + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Unwrap places every load error in the taxonomy: the caller's input is wrong.
func (e *LoadError) Unwrap() error { return errdefs.ErrInvalidArgument }

// Load parses and validates a policy file. source names it in errors (a path, or
// "template foo"); data is the YAML. Any mistake is a *LoadError.
func Load(data []byte, source string) (*Policy, error) {
	if source == "" {
		source = "policy"
	}
	l := &loader{src: source}
	if len(data) > MaxFileSize {
		return nil, l.errf(nil, "", "the file is %d bytes; a policy may be at most %d", len(data), MaxFileSize)
	}
	root, err := l.parse(data)
	if err != nil {
		return nil, err
	}
	p := &Policy{source: source}
	err = l.mapping(root, "", []string{"shell", "files", "network", "resources"}, func(key string, k, v *yaml.Node) error {
		switch key {
		case "shell":
			return l.shell(v, &p.shell)
		case "files":
			return l.files(k, v, &p.files)
		case "network":
			return l.network(v, &p.network)
		default:
			return l.resources(v, &p.resources)
		}
	})
	if err != nil {
		return nil, err
	}
	return p, nil
}

type loader struct{ src string }

func (l *loader) errf(n *yaml.Node, field, format string, args ...any) error {
	e := &LoadError{Source: l.src, Field: field, Msg: fmt.Sprintf(format, args...)}
	if n != nil {
		e.Line = n.Line
	}
	return e
}

// parse reads exactly one YAML document and returns its root (nil for an empty file).
func (l *loader) parse(data []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		return nil, l.yamlError(err)
	}
	var next yaml.Node
	if err := dec.Decode(&next); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, l.yamlError(err)
		}
		return nil, l.errf(&next, "", "more than one YAML document; a policy is one")
	}
	if err := l.noAliases(&doc, 0); err != nil {
		return nil, err
	}
	if len(doc.Content) == 0 {
		return nil, nil
	}
	return doc.Content[0], nil
}

// yamlError turns yaml.v3's "yaml: line 3: did not find expected key" into a LoadError.
func (l *loader) yamlError(err error) error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	e := &LoadError{Source: l.src, Msg: "not valid YAML: " + msg}
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if num, text, ok := strings.Cut(rest, ": "); ok {
			if n, err := strconv.Atoi(num); err == nil {
				e.Line, e.Msg = n, "not valid YAML: "+text
			}
		}
	}
	return e
}

// maxDepth bounds the nesting of the YAML tree: the schema is three levels deep.
const maxDepth = 16

func (l *loader) noAliases(n *yaml.Node, depth int) error {
	if depth > maxDepth {
		return l.errf(n, "", "nested more than %d levels deep", maxDepth)
	}
	if n.Kind == yaml.AliasNode {
		return l.errf(n, "", "YAML aliases (*%s) are not allowed in a policy: write the value out", n.Value)
	}
	for _, c := range n.Content {
		if err := l.noAliases(c, depth+1); err != nil {
			return err
		}
	}
	return nil
}

func isNull(n *yaml.Node) bool {
	return n == nil || (n.Kind == yaml.ScalarNode && n.Tag == "!!null")
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		switch n.Tag {
		case "!!str":
			return fmt.Sprintf("the string %q", n.Value)
		case "!!int", "!!float":
			return "the number " + n.Value
		case "!!bool":
			return "the boolean " + n.Value
		case "!!null":
			return "nothing"
		}
		return fmt.Sprintf("%s %q", n.Tag, n.Value)
	}
	return "something else"
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// mapping walks a mapping node key by key, in file order, refusing keys not in keys and
// keys given twice. A null node is an empty mapping.
func (l *loader) mapping(n *yaml.Node, path string, keys []string, fn func(key string, k, v *yaml.Node) error) error {
	if isNull(n) {
		return nil
	}
	what := path
	if what == "" {
		what = "the policy"
	}
	if n.Kind != yaml.MappingNode {
		return l.errf(n, path, "want a mapping with keys %s, got %s", strings.Join(keys, ", "), describe(n))
	}
	seen := make(map[string]bool, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			return l.errf(k, path, "a key in %s is %s; keys are names", what, describe(k))
		}
		field := join(path, k.Value)
		known := false
		for _, want := range keys {
			known = known || want == k.Value
		}
		if !known {
			return l.errf(k, field, "unknown field (%s has %s)", what, strings.Join(keys, ", "))
		}
		if seen[k.Value] {
			return l.errf(k, field, "given twice")
		}
		seen[k.Value] = true
		if err := fn(k.Value, k, v); err != nil {
			return err
		}
	}
	return nil
}

// item is one string from a list, with where it came from.
type item struct {
	value string
	field string
	node  *yaml.Node
}

func (l *loader) str(n *yaml.Node, field string) (string, error) {
	if n.Kind != yaml.ScalarNode || n.Tag != "!!str" {
		return "", l.errf(n, field, "want a string, got %s", describe(n))
	}
	if strings.IndexByte(n.Value, 0) >= 0 {
		return "", l.errf(n, field, "contains a NUL byte")
	}
	return n.Value, nil
}

func (l *loader) list(n *yaml.Node, field string) ([]item, error) {
	if isNull(n) {
		return nil, nil
	}
	if n.Kind != yaml.SequenceNode {
		return nil, l.errf(n, field, "want a list of strings, got %s", describe(n))
	}
	items := make([]item, 0, len(n.Content))
	for i, c := range n.Content {
		f := fmt.Sprintf("%s[%d]", field, i)
		s, err := l.str(c, f)
		if err != nil {
			return nil, err
		}
		items = append(items, item{s, f, c})
	}
	return items, nil
}

func (l *loader) resources(n *yaml.Node, r *wire.Limits) error {
	return l.mapping(n, "resources", []string{"memory", "cpus", "pids", "timeout", "tmp", "file_size", "disk"}, func(key string, _, v *yaml.Node) error {
		field := "resources." + key
		if v.Kind != yaml.ScalarNode {
			return l.errf(v, field, "want a single value, got %s", describe(v))
		}
		switch key {
		case "memory":
			size, err := l.size(v, field)
			if err != nil {
				return err
			}
			if size < 4<<20 {
				return l.errf(v, field, "%s is below the 4MiB a sandbox needs to start", wire.Size(size).String())
			}
			r.Memory = wire.Size(size)
		case "cpus":
			if v.Tag != "!!int" && v.Tag != "!!float" {
				return l.errf(v, field, "want a number of CPUs like 2 or 0.5, got %s", describe(v))
			}
			var f float64
			if err := v.Decode(&f); err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f < 0.01 || f > 1e6 {
				return l.errf(v, field, "%s is not a number of CPUs from 0.01 up", v.Value)
			}
			r.CPUs = f
		case "pids":
			var i int64
			if v.Tag != "!!int" || v.Decode(&i) != nil {
				return l.errf(v, field, "want a whole number of processes, got %s", describe(v))
			}
			if i < 4 {
				return l.errf(v, field, "%d is too few for the agent and a command (at least 4)", i)
			}
			r.Pids = i
		case "timeout":
			if v.Tag != "!!str" {
				return l.errf(v, field, "want a duration with a unit like 30s or 10m, got %s", describe(v))
			}
			d, err := time.ParseDuration(v.Value)
			if err != nil || d <= 0 {
				return l.errf(v, field, "%q is not a positive duration like 30s, 10m or 1h30m", v.Value)
			}
			r.Timeout = d
		case "tmp":
			size, err := l.size(v, field)
			if err != nil {
				return err
			}
			if size == 0 {
				return l.errf(v, field, "0B would make /tmp unlimited, not empty; give a size like 64MiB")
			}
			r.Tmp = wire.Size(size)
		case "file_size":
			size, err := l.size(v, field)
			if err != nil {
				return err
			}
			if size == 0 {
				return l.errf(v, field, "0B would forbid writing any file; leave file_size out for no limit")
			}
			r.FileSize = wire.Size(size)
		case "disk":
			size, err := l.size(v, field)
			if err != nil {
				return err
			}
			if size == 0 {
				return l.errf(v, field, "0B would leave no room for the workspace; leave disk out for the server's default")
			}
			r.Disk = wire.Size(size)
		}
		return nil
	})
}

func (l *loader) size(v *yaml.Node, field string) (int64, error) {
	if v.Kind != yaml.ScalarNode || (v.Tag != "!!str" && v.Tag != "!!int") {
		return 0, l.errf(v, field, "want a size like 512M or 1GiB, got %s", describe(v))
	}
	n, err := wire.ParseSize(v.Value)
	if err != nil {
		return 0, l.errf(v, field, "%s", strings.TrimSuffix(err.Error(), ": "+errdefs.ErrInvalidArgument.Error()))
	}
	return int64(n), nil
}
