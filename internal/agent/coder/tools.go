package coder

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// Tool is a tool as the model sees it: its description and its parameters' JSON schema.
type Tool struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}

//go:embed prompts/tools.json
var toolsJSON []byte

//go:embed prompts/system.md
var systemPrompt string

// Tools are the harness's tools, as prompts/tools.json describes them.
func Tools() []Tool {
	var ts []Tool
	if err := json.Unmarshal(toolsJSON, &ts); err != nil {
		panic("prompts/tools.json: " + err.Error()) // embedded, and checked by a test
	}
	return ts
}

// Bounds of the tools' answers, so that one tool call cannot fill the model's context.
const (
	maxReadBytes    = 256 << 10
	maxReadLines    = 2000
	maxListEntries  = 1000
	maxMatches      = 200
	maxSearchFile   = 2 << 20
	maxOutputKept   = 32 << 10 // a command's output: its first and last halves
	defaultTimeout  = 120 * time.Second
	maxTimeout      = 600 * time.Second
	maxWriteBytes   = 8 << 20
	maxToolArgBytes = 8<<20 + 64<<10
)

// skipDirs are not listed or searched: they are large and seldom what the model wants.
var skipDirs = []string{".git", "node_modules"}

// toolbox runs the tools in one workspace.
type toolbox struct {
	dir     string
	root    *os.Root
	host    Host
	undo    func(context.Context) (string, error)
	browser *browserSession
}

// call runs the tool a model asked for. Its error is for the model: it says what was
// wrong with the call and how to make it right.
func (tb *toolbox) call(ctx context.Context, name, args string) (string, error) {
	if len(args) > maxToolArgBytes {
		return "", fmt.Errorf("the arguments of %s are %d bytes, over %d: %w", name, len(args), maxToolArgBytes, errdefs.ErrInvalidArgument)
	}
	if strings.TrimSpace(args) == "" {
		args = "{}"
	}
	switch name {
	case "read_file":
		return run(args, name, tb.read)
	case "write_file":
		return run(args, name, tb.write)
	case "edit_file":
		return run(args, name, tb.edit)
	case "list_files":
		return run(args, name, tb.list)
	case "search_files":
		return run(args, name, tb.search)
	case "run_command":
		return run(args, name, func(a commandArgs) (string, error) { return tb.command(ctx, a) })
	case "app_status":
		return run(args, name, func(struct{}) (string, error) { return tb.hostCall(ctx, "app_status", Host.App) })
	case "restart_app":
		return run(args, name, func(struct{}) (string, error) { return tb.hostCall(ctx, "restart_app", Host.RestartApp) })
	case "undo":
		return run(args, name, func(struct{}) (string, error) { return tb.undo(ctx) })
	case "browser":
		return run(args, name, func(a browserArgs) (string, error) { return tb.browser.call(ctx, a) })
	}
	names := make([]string, 0, 8)
	for _, t := range Tools() {
		names = append(names, t.Name)
	}
	return "", fmt.Errorf("there is no tool %q; the tools are %s: %w", errdefs.Clip(name, 64), strings.Join(names, ", "), errdefs.ErrNotFound)
}

// run decodes args strictly into A and calls f.
func run[A any](args, name string, f func(A) (string, error)) (string, error) {
	var a A
	dec := json.NewDecoder(strings.NewReader(args))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&a); err != nil {
		return "", fmt.Errorf("the arguments of %s are not a JSON object of its parameters (%s); send them again as its schema says: %w",
			name, errdefs.Clip(err.Error(), 200), errdefs.ErrInvalidArgument)
	}
	return f(a)
}

// rel turns a path the model gave into one inside the workspace root.
func (tb *toolbox) rel(p string) (string, error) {
	if p == "" || p == "." || p == "/" {
		return ".", nil
	}
	if filepath.IsAbs(p) {
		r, err := filepath.Rel(tb.dir, p)
		if err != nil || r == ".." || strings.HasPrefix(r, "../") {
			return "", fmt.Errorf("path %q is outside the workspace %s; give a path relative to it: %w", errdefs.Clip(p, 200), tb.dir, errdefs.ErrInvalidArgument)
		}
		p = r
	}
	c := filepath.Clean(p)
	if c == ".." || strings.HasPrefix(c, "../") || strings.ContainsRune(c, 0) {
		return "", fmt.Errorf("path %q leaves the workspace: %w", errdefs.Clip(p, 200), errdefs.ErrInvalidArgument)
	}
	return c, nil
}

func fileErr(p string, err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%s does not exist; list_files shows what does: %w", p, errdefs.ErrNotFound)
	case strings.Contains(err.Error(), "path escapes"):
		return fmt.Errorf("%s leads outside the workspace (through a symbolic link): %w", p, errdefs.ErrPermissionDenied)
	}
	return fmt.Errorf("%s: %w", p, err)
}

type readArgs struct {
	Path   string `json:"path"`
	Offset int    `json:"offset"`
	Limit  int    `json:"limit"`
}

func (tb *toolbox) read(a readArgs) (string, error) {
	p, err := tb.rel(a.Path)
	if err != nil {
		return "", err
	}
	f, err := tb.root.Open(p)
	if err != nil {
		return "", fileErr(p, err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.IsDir() {
		return "", fmt.Errorf("%s is a directory; use list_files: %w", p, errdefs.ErrInvalidArgument)
	}
	first := max(a.Offset, 1)
	limit := a.Limit
	if limit <= 0 || limit > maxReadLines {
		limit = maxReadLines
	}
	var out strings.Builder
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), maxReadBytes)
	n, shown := 0, 0
	for sc.Scan() {
		n++
		if n < first {
			continue
		}
		if shown == limit || out.Len()+len(sc.Bytes()) > maxReadBytes {
			fmt.Fprintf(&out, "[%s continues after line %d: read again with offset %d]\n", p, n-1, n)
			return out.String(), nil
		}
		out.Write(sc.Bytes())
		out.WriteByte('\n')
		shown++
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("reading %s: a line is longer than %d bytes: %w", p, maxReadBytes, errdefs.ErrLimitExceeded)
	}
	if n < first && n > 0 {
		return "", fmt.Errorf("%s has %d lines; offset %d is past its end: %w", p, n, first, errdefs.ErrInvalidArgument)
	}
	if n == 0 {
		return "[" + p + " is empty]", nil
	}
	return out.String(), nil
}

type writeArgs struct {
	Path    string `json:"path"`
	Content string `json:"content"`
}

func (tb *toolbox) write(a writeArgs) (string, error) {
	p, err := tb.rel(a.Path)
	if err != nil {
		return "", err
	}
	if p == "." {
		return "", fmt.Errorf("path is required: %w", errdefs.ErrInvalidArgument)
	}
	if len(a.Content) > maxWriteBytes {
		return "", fmt.Errorf("content is %d bytes, over %d: %w", len(a.Content), maxWriteBytes, errdefs.ErrLimitExceeded)
	}
	if d := filepath.Dir(p); d != "." {
		if err := tb.root.MkdirAll(d, 0o755); err != nil {
			return "", fileErr(d, err)
		}
	}
	if err := tb.root.WriteFile(p, []byte(a.Content), 0o644); err != nil {
		return "", fileErr(p, err)
	}
	return fmt.Sprintf("wrote %s (%d bytes)", p, len(a.Content)), nil
}

type editArgs struct {
	Path       string `json:"path"`
	OldString  string `json:"old_string"`
	NewString  string `json:"new_string"`
	ReplaceAll bool   `json:"replace_all"`
}

func (tb *toolbox) edit(a editArgs) (string, error) {
	p, err := tb.rel(a.Path)
	if err != nil {
		return "", err
	}
	if a.OldString == "" {
		return "", fmt.Errorf("old_string is empty; to create a file use write_file: %w", errdefs.ErrInvalidArgument)
	}
	b, err := tb.root.ReadFile(p)
	if err != nil {
		return "", fileErr(p, err)
	}
	s := string(b)
	n := strings.Count(s, a.OldString)
	switch {
	case n == 0:
		return "", fmt.Errorf("old_string does not occur in %s; read the file and copy the text exactly, whitespace included: %w", p, errdefs.ErrNotFound)
	case n > 1 && !a.ReplaceAll:
		return "", fmt.Errorf("old_string occurs %d times in %s; give more surrounding text to make it unique, or set replace_all: %w", n, p, errdefs.ErrInvalidArgument)
	}
	if !a.ReplaceAll {
		n = 1
	}
	s = strings.Replace(s, a.OldString, a.NewString, n)
	if err := tb.root.WriteFile(p, []byte(s), 0o644); err != nil {
		return "", fileErr(p, err)
	}
	return fmt.Sprintf("edited %s: replaced %d occurrence(s)", p, n), nil
}

type listArgs struct {
	Path  string `json:"path"`
	Depth int    `json:"depth"`
}

func (tb *toolbox) list(a listArgs) (string, error) {
	p, err := tb.rel(a.Path)
	if err != nil {
		return "", err
	}
	depth := a.Depth
	if depth <= 0 {
		depth = 2
	}
	depth = min(depth, 10)
	var out []string
	more := false
	err = fs.WalkDir(tb.root.FS(), p, func(q string, d fs.DirEntry, err error) error {
		if err != nil {
			if q == p {
				return err
			}
			return nil // an unreadable subdirectory is left out
		}
		if q == p {
			return nil
		}
		r := strings.TrimPrefix(q, p+"/")
		if p == "." {
			r = q
		}
		if d.IsDir() && slices.Contains(skipDirs, d.Name()) {
			out = append(out, r+"/ (not listed)")
			return fs.SkipDir
		}
		if len(out) == maxListEntries {
			more = true
			return fs.SkipAll
		}
		if d.IsDir() {
			out = append(out, r+"/")
			if strings.Count(r, "/")+1 >= depth {
				return fs.SkipDir
			}
			return nil
		}
		out = append(out, r)
		return nil
	})
	if err != nil {
		return "", fileErr(p, err)
	}
	if len(out) == 0 {
		return "[" + p + " is empty]", nil
	}
	s := strings.Join(out, "\n")
	if more {
		s += fmt.Sprintf("\n[more than %d entries: list a subdirectory]", maxListEntries)
	}
	return s, nil
}

type searchArgs struct {
	Pattern string `json:"pattern"`
	Path    string `json:"path"`
}

func (tb *toolbox) search(a searchArgs) (string, error) {
	re, err := regexp.Compile(a.Pattern)
	if err != nil {
		return "", fmt.Errorf("pattern is not a regular expression (%s): %w", errdefs.Clip(err.Error(), 200), errdefs.ErrInvalidArgument)
	}
	p, err := tb.rel(a.Path)
	if err != nil {
		return "", err
	}
	var out []string
	more := false
	err = fs.WalkDir(tb.root.FS(), p, func(q string, d fs.DirEntry, err error) error {
		switch {
		case err != nil && q == p:
			return err
		case err != nil:
			return nil
		case d.IsDir() && slices.Contains(skipDirs, d.Name()):
			return fs.SkipDir
		case !d.Type().IsRegular():
			return nil
		}
		if fi, err := d.Info(); err != nil || fi.Size() > maxSearchFile {
			return nil
		}
		b, err := tb.root.ReadFile(q)
		if err != nil || bytes.IndexByte(b, 0) >= 0 {
			return nil // unreadable or binary
		}
		for i, line := range strings.Split(string(b), "\n") {
			if !re.MatchString(line) {
				continue
			}
			if len(out) == maxMatches {
				more = true
				return fs.SkipAll
			}
			out = append(out, fmt.Sprintf("%s:%d: %s", q, i+1, errdefs.Clip(line, 300)))
		}
		return nil
	})
	if err != nil {
		return "", fileErr(p, err)
	}
	if len(out) == 0 {
		return "no matches", nil
	}
	s := strings.Join(out, "\n")
	if more {
		s += fmt.Sprintf("\n[more than %d matches: narrow the pattern or the path]", maxMatches)
	}
	return s, nil
}

type commandArgs struct {
	Command        string `json:"command"`
	TimeoutSeconds int    `json:"timeout_seconds"`
}

// command runs a shell command in the workspace, in its own process group so that a
// timeout ends everything it started.
func (tb *toolbox) command(ctx context.Context, a commandArgs) (string, error) {
	if strings.TrimSpace(a.Command) == "" {
		return "", fmt.Errorf("command is empty: %w", errdefs.ErrInvalidArgument)
	}
	timeout := defaultTimeout
	if a.TimeoutSeconds != 0 {
		if a.TimeoutSeconds < 1 || time.Duration(a.TimeoutSeconds)*time.Second > maxTimeout {
			return "", fmt.Errorf("timeout_seconds %d is outside 1 to %d: %w", a.TimeoutSeconds, int(maxTimeout.Seconds()), errdefs.ErrInvalidArgument)
		}
		timeout = time.Duration(a.TimeoutSeconds) * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", a.Command)
	cmd.Dir = tb.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second // a background child holding the pipes open
	out := &boundedBuffer{half: maxOutputKept / 2}
	cmd.Stdout, cmd.Stderr = out, out
	err := cmd.Run()
	var b strings.Builder
	var ee *exec.ExitError
	switch {
	case ctx.Err() == context.DeadlineExceeded:
		fmt.Fprintf(&b, "limit hit: timeout: the command ran for %s and was killed\n", timeout)
	case errors.As(err, &ee) && ee.ExitCode() >= 0:
		fmt.Fprintf(&b, "exit status %d\n", ee.ExitCode())
	case errors.As(err, &ee):
		fmt.Fprintf(&b, "killed by signal %s\n", ee.ProcessState.Sys().(syscall.WaitStatus).Signal())
	case err != nil && !errors.Is(err, exec.ErrWaitDelay):
		return "", fmt.Errorf("the command could not run: %w", err)
	default:
		b.WriteString("exit status 0\n")
	}
	if out.dropped > 0 {
		fmt.Fprintf(&b, "limit hit: output: %d bytes of the middle of the output were left out\n", out.dropped)
	}
	if errors.Is(err, exec.ErrWaitDelay) {
		b.WriteString("note: a process it started in the background still holds its output open\n")
	}
	b.WriteString("--- output ---\n")
	b.Write(out.bytes())
	return b.String(), nil
}

// boundedBuffer keeps the first half bytes written and the last half, and counts what
// it left out between them.
type boundedBuffer struct {
	half    int
	head    []byte
	tail    []byte
	dropped int64
}

func (b *boundedBuffer) Write(p []byte) (int, error) {
	n := len(p)
	if room := b.half - len(b.head); room > 0 {
		k := min(room, len(p))
		b.head = append(b.head, p[:k]...)
		p = p[k:]
	}
	b.tail = append(b.tail, p...)
	if over := len(b.tail) - b.half; over > 0 {
		b.dropped += int64(over)
		b.tail = append(b.tail[:0], b.tail[over:]...)
	}
	return n, nil
}

func (b *boundedBuffer) bytes() []byte {
	if b.dropped == 0 {
		return append(slices.Clip(b.head), b.tail...)
	}
	return slices.Concat(b.head, []byte("\n[… output left out …]\n"), b.tail)
}

// hostCall runs one of the host's operations for the model.
func (tb *toolbox) hostCall(ctx context.Context, what string, f func(Host, context.Context) (string, error)) (string, error) {
	if tb.host == nil {
		return "", fmt.Errorf("%s is not available here: the harness runs outside a paddock sandbox (no %s): %w", what, servicesEnv, errdefs.ErrUnavailable)
	}
	return f(tb.host, ctx)
}
