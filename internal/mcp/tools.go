package mcp

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"path"
	"reflect"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/paddockhq/paddock"
	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/runner"
)

// Bounds on what a tool returns: a model's context is small, and a command's output or a
// file can be large. A result that was cut says so.
const (
	maxStreamOutput = 16 << 10  // the end of a command's stdout, and of its stderr
	defaultRead     = 64 << 10  // read_file without max_bytes
	maxRead         = 256 << 10 // read_file's max_bytes at most
	maxEditFile     = 1 << 20   // edit_file reads and rewrites the whole file
	maxListEntries  = 500
	defaultHistory  = 20
	maxHistory      = 200
	defaultTimeout  = 60 // seconds
	maxTimeout      = 600
	maxProgressText = 1 << 10
)

// Options configure NewServer.
type Options struct {
	// Version is the server's version, as initialize answers it.
	Version string
	Log     *slog.Logger
	// ReadOnly serves only the tools that change nothing (listing sandboxes, reading and
	// listing files, history, the app's state) and the file resources: for a caller whose
	// credentials may only read. A call of any other tool is an error result with the
	// text of Refuse's error.
	ReadOnly bool
	// Refuse, with ReadOnly, is why tool may not be called (the scope the caller lacks);
	// it may record the refusal.
	Refuse func(ctx context.Context, tool string) error
}

// NewServer is an MCP server whose tools and resources act through b.
func NewServer(b Backend, opts Options) *sdk.Server {
	if opts.Version == "" {
		opts.Version = "dev"
		if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
			opts.Version = bi.Main.Version
		}
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	instr := instructions
	if opts.ReadOnly {
		instr += "\n" + readOnlyInstructions
	}
	s := sdk.NewServer(&sdk.Implementation{Name: "paddock", Title: "paddock sandboxes", Version: opts.Version}, &sdk.ServerOptions{
		Instructions: instr,
	})
	t := &tools{b: b, log: opts.Log, readOnly: opts.ReadOnly, withheld: map[string]bool{}, args: map[string][]string{}}
	t.register(s)
	s.AddReceivingMiddleware(t.preciseArguments)
	if opts.ReadOnly {
		s.AddReceivingMiddleware(t.refuseWithheld(opts.Refuse))
	}
	s.AddResourceTemplate(&sdk.ResourceTemplate{
		Name:        "sandbox-file",
		Title:       "A file of a sandbox's workspace",
		URITemplate: fileURITemplate,
		Description: "The content of a file in a sandbox's workspace (/workspace), read through the sandbox's policy. Text as text, other bytes as a blob; at most 256 KiB.",
	}, t.readResource)
	return s
}

const instructions = `paddock runs your code in sandboxes: isolated Linux machines with a persistent workspace at /workspace, every change of which is recorded in a history you can undo.
Start with list_sandboxes (or create_sandbox), then run_command, read_file, write_file and edit_file with that sandbox's ID. Paths are relative to /workspace.
Checkpoint before a risky change; undo or restore to go back. Errors say what was wrong and what to do next.`

const readOnlyInstructions = `Your credentials may only read: the tools here list sandboxes, read and list files, show a workspace's history and the app's state. To change anything, ask the user for an API token with scope write.`

// fileURITemplate names a file of a sandbox: paddock://sandboxes/ID/files/PATH.
const (
	fileURITemplate = "paddock://sandboxes/{sandbox}/files/{+path}"
	fileURIPrefix   = "paddock://sandboxes/"
)

// FileURI is the resource URI of file p of sandbox id.
func FileURI(id, p string) string {
	return fileURIPrefix + id + "/files/" + strings.TrimPrefix(p, "/")
}

// ToolNames are the names of the server's tools, sorted: those an event may name.
var ToolNames = sync.OnceValue(func() []string {
	t := &tools{withheld: map[string]bool{}, args: map[string][]string{}}
	t.register(sdk.NewServer(&sdk.Implementation{Name: "paddock"}, nil))
	return slices.Sorted(maps.Keys(t.args))
})

type tools struct {
	b        Backend
	log      *slog.Logger
	readOnly bool
	// withheld are the tools a read-only server does not serve.
	withheld map[string]bool
	// args are each tool's arguments, in the order its schema lists them.
	args map[string][]string
}

// refuseWithheld answers a call of a withheld tool with an error result saying why,
// where the SDK would answer "unknown tool": the model learns what it lacks.
func (t *tools) refuseWithheld(refuse func(context.Context, string) error) sdk.Middleware {
	return func(next sdk.MethodHandler) sdk.MethodHandler {
		return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
			p, ok := req.GetParams().(*sdk.CallToolParamsRaw)
			if method != "tools/call" || !ok || p == nil || !t.withheld[p.Name] {
				return next(ctx, method, req)
			}
			err := fmt.Errorf("the tool %s changes things, and these credentials may only read: %w", p.Name, errdefs.ErrPermissionDenied)
			if refuse != nil {
				err = refuse(ctx, p.Name)
			}
			if a, ok := t.b.(Auditor); ok {
				var in struct{ Sandbox string }
				_ = json.Unmarshal(p.Arguments, &in)
				a.ToolCalled(ctx, p.Name, in.Sandbox, err)
			}
			return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: t.describe(p.Name, err)}}}, nil
		}
	}
}

// Each tool's input. The schema is derived from the struct: a field without omitempty is
// required, and no other property is accepted.
type (
	sandboxIn struct {
		Sandbox string `json:"sandbox" jsonschema:"the sandbox's ID, as list_sandboxes or create_sandbox gives it"`
	}
	createIn struct {
		Name   string  `json:"name,omitempty" jsonschema:"a name for the sandbox (letters, digits, dashes); one is made up when empty"`
		Memory string  `json:"memory,omitempty" jsonschema:"memory limit with a unit, like 512M or 2G; the server's default when empty"`
		CPUs   float64 `json:"cpus,omitempty" jsonschema:"CPU limit, in CPUs (0.5, 2); the server's default when 0"`
		Disk   string  `json:"disk,omitempty" jsonschema:"disk limit of the workspace and /tmp together, like 5G; none when empty"`
	}
	runIn struct {
		Sandbox        string   `json:"sandbox" jsonschema:"the sandbox's ID"`
		Argv           []string `json:"argv" jsonschema:"the program and its arguments, run directly without a shell; for pipes or redirection use [\"sh\", \"-c\", \"...\"]"`
		Cwd            string   `json:"cwd,omitempty" jsonschema:"working directory, relative to /workspace (the default)"`
		Env            []string `json:"env,omitempty" jsonschema:"extra environment entries, NAME=VALUE"`
		Stdin          string   `json:"stdin,omitempty" jsonschema:"the command's whole standard input; it is closed after this"`
		TimeoutSeconds int      `json:"timeout_seconds,omitempty" jsonschema:"kill the command after this many seconds (default 60, at most 600)"`
	}
	readIn struct {
		Sandbox  string `json:"sandbox" jsonschema:"the sandbox's ID"`
		Path     string `json:"path" jsonschema:"the file's path, relative to /workspace"`
		MaxBytes int    `json:"max_bytes,omitempty" jsonschema:"read at most this many bytes from the start (default 65536, at most 262144)"`
	}
	writeIn struct {
		Sandbox string `json:"sandbox" jsonschema:"the sandbox's ID"`
		Path    string `json:"path" jsonschema:"the file's path, relative to /workspace; missing parent directories are made"`
		Content string `json:"content" jsonschema:"the file's whole new content (UTF-8 text)"`
	}
	editIn struct {
		Sandbox    string `json:"sandbox" jsonschema:"the sandbox's ID"`
		Path       string `json:"path" jsonschema:"the file's path, relative to /workspace"`
		OldString  string `json:"old_string" jsonschema:"the exact text to replace, whitespace included; it must occur exactly once unless replace_all is set"`
		NewString  string `json:"new_string" jsonschema:"the text to put in its place"`
		ReplaceAll bool   `json:"replace_all,omitempty" jsonschema:"replace every occurrence of old_string"`
	}
	listIn struct {
		Sandbox string `json:"sandbox" jsonschema:"the sandbox's ID"`
		Path    string `json:"path,omitempty" jsonschema:"the directory, relative to /workspace (the default)"`
	}
	moveIn struct {
		Sandbox   string `json:"sandbox" jsonschema:"the sandbox's ID"`
		From      string `json:"from" jsonschema:"the file or directory to move, relative to /workspace"`
		To        string `json:"to" jsonschema:"where it goes, relative to /workspace"`
		Overwrite bool   `json:"overwrite,omitempty" jsonschema:"replace what is at to; without it an existing to is an error"`
	}
	removeIn struct {
		Sandbox   string `json:"sandbox" jsonschema:"the sandbox's ID"`
		Path      string `json:"path" jsonschema:"the file or directory, relative to /workspace"`
		Recursive bool   `json:"recursive,omitempty" jsonschema:"remove a directory and everything in it"`
	}
	historyIn struct {
		Sandbox string `json:"sandbox" jsonschema:"the sandbox's ID"`
		Limit   int    `json:"limit,omitempty" jsonschema:"list at most this many checkpoints, newest first (default 20, at most 200)"`
	}
	checkpointIn struct {
		Sandbox string `json:"sandbox" jsonschema:"the sandbox's ID"`
		Message string `json:"message,omitempty" jsonschema:"what the workspace holds now, to find this checkpoint again"`
	}
	restoreIn struct {
		Sandbox    string `json:"sandbox" jsonschema:"the sandbox's ID"`
		Checkpoint string `json:"checkpoint" jsonschema:"the checkpoint's ID, as history lists it"`
	}
)

// Results. Each is an object (structured content), and its text form is its JSON.
type (
	sandboxOut struct {
		Sandbox api.Sandbox `json:"sandbox"`
	}
	sandboxesOut struct {
		Sandboxes []api.Sandbox `json:"sandboxes"`
	}
	runOut struct {
		ExitCode int    `json:"exit_code"`
		Signal   int    `json:"signal,omitempty"`
		Limit    string `json:"limit,omitempty"`
		Error    string `json:"error,omitempty"`
		Stdout   string `json:"stdout"`
		Stderr   string `json:"stderr"`
		// StdoutOmitted and StderrOmitted count the bytes cut from the start.
		StdoutOmitted int64 `json:"stdout_omitted_bytes,omitempty"`
		StderrOmitted int64 `json:"stderr_omitted_bytes,omitempty"`
	}
	readOut struct {
		Path          string `json:"path"`
		Content       string `json:"content,omitempty"`
		ContentBase64 string `json:"content_base64,omitempty"`
		Truncated     bool   `json:"truncated,omitempty"`
		Note          string `json:"note,omitempty"`
	}
	fileOut struct {
		File api.FileInfo `json:"file"`
	}
	editOut struct {
		File         api.FileInfo `json:"file"`
		Replacements int          `json:"replacements"`
	}
	listOut struct {
		Path      string         `json:"path"`
		Entries   []api.FileInfo `json:"entries"`
		Truncated bool           `json:"truncated,omitempty"`
		Note      string         `json:"note,omitempty"`
	}
	doneOut struct {
		Done string `json:"done"`
	}
	historyOut struct {
		Current     string           `json:"current,omitempty"`
		Checkpoints []api.Checkpoint `json:"checkpoints"`
		Transaction *api.Transaction `json:"transaction,omitempty"`
		Truncated   bool             `json:"truncated,omitempty"`
	}
	appOut struct {
		App api.AppStatus `json:"app"`
	}
)

func (t *tools) register(s *sdk.Server) {
	add(s, t, &sdk.Tool{Name: "list_sandboxes", Description: "List your sandboxes: ID, name, state (running, stopped, failed), limits and the app's URL. Use an ID with the other tools.",
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}}, nil,
		func(ctx context.Context, _ *sdk.CallToolRequest, _ struct{}) (any, error) {
			list, err := t.b.ListSandboxes(ctx)
			for i := range list {
				list[i] = redact(list[i])
			}
			return sandboxesOut{Sandboxes: nonNil(list)}, err
		})
	add(s, t, &sdk.Tool{Name: "create_sandbox", Description: "Create and start a new sandbox: an isolated Linux machine with an empty persistent workspace at /workspace. Returns its ID. Limits not given are the server's defaults, and your policy may lower them."}, nil,
		func(ctx context.Context, _ *sdk.CallToolRequest, in createIn) (any, error) {
			sb, err := t.b.CreateSandbox(ctx, api.CreateSandboxRequest{Name: in.Name, Limits: api.Limits{Memory: in.Memory, CPUs: in.CPUs, Disk: in.Disk}})
			return sandboxOut{Sandbox: redact(sb)}, err
		})
	add(s, t, &sdk.Tool{Name: "stop_sandbox", Description: "Stop a sandbox: its processes end, its workspace is kept. restart_sandbox starts it again."},
		nil, t.lifecycle("stop"))
	add(s, t, &sdk.Tool{Name: "restart_sandbox", Description: "Restart a sandbox (stopped or running): its processes and its app start afresh on the same workspace. Use it when the app is stuck."},
		nil, t.lifecycle("restart"))
	add(s, t, &sdk.Tool{Name: "delete_sandbox", Description: "Delete a sandbox and its workspace, for good: nothing of it can be restored.",
		Annotations: &sdk.ToolAnnotations{DestructiveHint: ptr(true)}}, nil,
		func(ctx context.Context, _ *sdk.CallToolRequest, in sandboxIn) (any, error) {
			err := t.b.DeleteSandbox(ctx, in.Sandbox)
			return doneOut{Done: "deleted sandbox " + in.Sandbox}, err
		})
	add(s, t, &sdk.Tool{Name: "app_status", Description: "What the sandbox's supervised app is doing: starting, running or backoff (it exited and waits to start again), how often it restarted, how its last run ended and the end of its output, and its URL.",
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}}, nil,
		func(ctx context.Context, _ *sdk.CallToolRequest, in sandboxIn) (any, error) {
			st, err := t.b.AppStatus(ctx, in.Sandbox)
			return appOut{App: st}, err
		})
	add(s, t, &sdk.Tool{Name: "run_command", Description: "Run a command in a sandbox and wait for it to exit. Returns the exit code, the end of stdout and stderr (at most 16 KiB each; the bytes cut from the start are counted), and, when the command met one of the sandbox's limits (timeout, memory, pids, file_size, disk), which one. Output is sent as progress notifications while it runs. A command the sandbox's policy refuses is an error naming the rule."},
		func(s *jsonschema.Schema) {
			// Required, so not null (the derived schema lets a slice be null).
			s.Properties["argv"].Type, s.Properties["argv"].Types = "array", nil
			s.Properties["argv"].MinItems = ptr(1)
			s.Properties["timeout_seconds"].Minimum = ptr(0.0)
			s.Properties["timeout_seconds"].Maximum = ptr(float64(maxTimeout))
		}, t.run)
	add(s, t, &sdk.Tool{Name: "read_file", Description: "Read a file of a sandbox's workspace. Text comes back as text, other bytes as base64; at most max_bytes from the start (truncated says the file goes on: read the rest with run_command, e.g. sed -n or tail).",
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}},
		func(s *jsonschema.Schema) {
			s.Properties["path"].MinLength = ptr(1)
			s.Properties["max_bytes"].Minimum = ptr(0.0)
			s.Properties["max_bytes"].Maximum = ptr(float64(maxRead))
		}, t.read)
	add(s, t, &sdk.Tool{Name: "write_file", Description: "Write a whole file of a sandbox's workspace, replacing what is there and making missing parent directories. The change is recorded in the sandbox's history. To change part of a file, use edit_file."},
		func(s *jsonschema.Schema) { s.Properties["path"].MinLength = ptr(1) },
		func(ctx context.Context, _ *sdk.CallToolRequest, in writeIn) (any, error) {
			fi, err := t.b.WriteFile(ctx, in.Sandbox, in.Path, []byte(in.Content), 0)
			return fileOut{File: fi}, err
		})
	add(s, t, &sdk.Tool{Name: "edit_file", Description: "Replace exact text in a file of a sandbox's workspace. old_string must occur exactly once (include enough surrounding lines to make it unique), or set replace_all. Fails, changing nothing, when old_string is absent or not unique. Files up to 1 MiB."},
		func(s *jsonschema.Schema) {
			s.Properties["path"].MinLength = ptr(1)
			s.Properties["old_string"].MinLength = ptr(1)
		}, t.edit)
	add(s, t, &sdk.Tool{Name: "list_files", Description: "List a directory of a sandbox's workspace: each entry's name, path, size, mode, whether it is a directory, and when it changed (at most 500 entries).",
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}}, nil,
		func(ctx context.Context, _ *sdk.CallToolRequest, in listIn) (any, error) {
			dir := in.Path
			if dir == "" {
				dir = "."
			}
			list, err := t.b.ListFiles(ctx, in.Sandbox, dir)
			out := listOut{Path: dir, Entries: nonNil(list)}
			if len(list) > maxListEntries {
				out.Entries, out.Truncated = list[:maxListEntries], true
				out.Note = fmt.Sprintf("%d entries, the first %d listed; list a subdirectory, or run find or ls with run_command", len(list), maxListEntries)
			}
			return out, err
		})
	add(s, t, &sdk.Tool{Name: "move_file", Description: "Move or rename a file or directory within a sandbox's workspace."},
		func(s *jsonschema.Schema) {
			s.Properties["from"].MinLength = ptr(1)
			s.Properties["to"].MinLength = ptr(1)
		},
		func(ctx context.Context, _ *sdk.CallToolRequest, in moveIn) (any, error) {
			fi, err := t.b.Move(ctx, in.Sandbox, api.FileMoveRequest{From: in.From, To: in.To, Overwrite: in.Overwrite})
			return fileOut{File: fi}, err
		})
	add(s, t, &sdk.Tool{Name: "remove_file", Description: "Remove a file, or with recursive a directory and all it holds, from a sandbox's workspace. The history keeps it: undo brings it back.",
		Annotations: &sdk.ToolAnnotations{DestructiveHint: ptr(true)}},
		func(s *jsonschema.Schema) { s.Properties["path"].MinLength = ptr(1) },
		func(ctx context.Context, _ *sdk.CallToolRequest, in removeIn) (any, error) {
			err := t.b.Remove(ctx, in.Sandbox, in.Path, in.Recursive)
			if !in.Recursive && errors.Is(err, errdefs.ErrFailedPrecondition) && strings.Contains(err.Error(), "not empty") {
				// The argument is the way out, not the sandbox's state.
				err = fmt.Errorf("remove %s: the directory is not empty; set recursive to remove it and all it holds: %w", in.Path, errdefs.ErrInvalidArgument)
			}
			return doneOut{Done: "removed " + in.Path}, err
		})
	add(s, t, &sdk.Tool{Name: "history", Description: "The workspace's history: its checkpoints, newest first (ID, time, cause, message, how many paths changed), and the current one. Each write, command and restore makes one.",
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}},
		func(s *jsonschema.Schema) {
			s.Properties["limit"].Minimum = ptr(0.0)
			s.Properties["limit"].Maximum = ptr(float64(maxHistory))
		},
		func(ctx context.Context, _ *sdk.CallToolRequest, in historyIn) (any, error) {
			h, err := t.b.History(ctx, in.Sandbox)
			n := in.Limit
			if n == 0 {
				n = defaultHistory
			}
			out := historyOut{Current: h.Current, Checkpoints: nonNil(h.Checkpoints), Transaction: h.Transaction}
			if len(out.Checkpoints) > n {
				out.Checkpoints, out.Truncated = out.Checkpoints[:n], true
			}
			return out, err
		})
	add(s, t, &sdk.Tool{Name: "checkpoint", Description: "Record the workspace as it is now as a checkpoint, with a message, to restore later. Nothing is made when nothing changed since the last one (created is false)."}, nil,
		func(ctx context.Context, _ *sdk.CallToolRequest, in checkpointIn) (any, error) {
			return t.b.Checkpoint(ctx, in.Sandbox, in.Message)
		})
	add(s, t, &sdk.Tool{Name: "undo", Description: "Undo the workspace's last change: its files go back to the previous checkpoint (recorded as a restore, so redo can bring the change back). The app restarts on the restored files."}, nil,
		func(ctx context.Context, _ *sdk.CallToolRequest, in sandboxIn) (any, error) {
			return t.b.Undo(ctx, in.Sandbox)
		})
	add(s, t, &sdk.Tool{Name: "redo", Description: "Redo the change the last undo took back."}, nil,
		func(ctx context.Context, _ *sdk.CallToolRequest, in sandboxIn) (any, error) {
			return t.b.Redo(ctx, in.Sandbox)
		})
	add(s, t, &sdk.Tool{Name: "restore", Description: "Bring the workspace's files back to a checkpoint history lists. Recorded as a new checkpoint, so it can itself be undone."},
		func(s *jsonschema.Schema) { s.Properties["checkpoint"].MinLength = ptr(1) },
		func(ctx context.Context, _ *sdk.CallToolRequest, in restoreIn) (any, error) {
			return t.b.Restore(ctx, in.Sandbox, in.Checkpoint)
		})
}

// add registers tool tt with handler h. edit refines the schema derived from In (bounds
// the struct tags cannot say). An error h returns is a tool error result (isError) whose
// text says what was wrong and what to do; a Backend that is an Auditor records the call.
func add[In any](s *sdk.Server, t *tools, tt *sdk.Tool, edit func(*jsonschema.Schema), h func(context.Context, *sdk.CallToolRequest, In) (any, error)) {
	schema, err := jsonschema.For[In](nil)
	if err != nil {
		panic(fmt.Sprintf("tool %s: %v", tt.Name, err)) // a programming error, found by any test
	}
	if schema.Properties == nil {
		schema.Properties = map[string]*jsonschema.Schema{}
	}
	if edit != nil {
		edit(schema)
	}
	t.args[tt.Name] = schema.PropertyOrder
	if t.readOnly && (tt.Annotations == nil || !tt.Annotations.ReadOnlyHint) {
		t.withheld[tt.Name] = true
		return
	}
	tt.InputSchema = schema
	sdk.AddTool(s, tt, func(ctx context.Context, req *sdk.CallToolRequest, in In) (*sdk.CallToolResult, any, error) {
		out, err := checkSandbox(in)
		if err == nil {
			out, err = h(ctx, req, in)
		}
		if a, ok := t.b.(Auditor); ok {
			a.ToolCalled(ctx, tt.Name, sandboxOf(in), err)
		}
		if err != nil {
			return nil, nil, errors.New(t.describe(tt.Name, err))
		}
		if r, ok := out.(*sdk.CallToolResult); ok {
			return r, nil, nil
		}
		return nil, out, nil
	})
}

// checkSandbox refuses an input whose sandbox argument cannot be a sandbox's ID, before
// it reaches the Backend: the API would answer for some such strings a route that does
// not exist, not the argument that is wrong.
func checkSandbox(in any) (any, error) {
	v := reflect.ValueOf(in)
	if v.Kind() != reflect.Struct {
		return nil, nil
	}
	if f := v.FieldByName("Sandbox"); f.IsValid() && f.Kind() == reflect.String && !runner.ValidID(f.String()) {
		return nil, fmt.Errorf("argument \"sandbox\": %q is not a sandbox ID (sb- and 10 characters of a-z2-7, as list_sandboxes and create_sandbox give them): %w",
			errdefs.Clip(f.String(), 64), errdefs.ErrInvalidArgument)
	}
	return nil, nil
}

// sandboxOf is the sandbox a tool's input names, if it names one.
func sandboxOf(in any) string {
	v := reflect.ValueOf(in)
	if v.Kind() != reflect.Struct {
		return ""
	}
	if f := v.FieldByName("Sandbox"); f.IsValid() && f.Kind() == reflect.String {
		return f.String()
	}
	return ""
}

// Describe is err as a tool's error result says it: the kind of error, the message (which
// names the sandbox, the path, the policy's rule or the limit) and what to do about it.
func Describe(err error) string {
	msg := err.Error()
	for _, k := range []struct {
		kind error
		hint string
	}{
		{errdefs.ErrUnauthenticated, "the credentials are missing, expired or revoked: ask the user to run `paddock login` again or to configure a new API token"},
		{errdefs.ErrNotFound, "check the ID or path: list_sandboxes lists your sandboxes, list_files a directory"},
		{errdefs.ErrPermissionDenied, "the sandbox's policy or your token does not allow this; do something else, or ask the user to change the policy"},
		{errdefs.ErrFailedPrecondition, "the sandbox or its workspace is not in a state that allows this, as the message says (restart_sandbox starts a stopped sandbox)"},
		{errdefs.ErrLimitExceeded, "a limit was hit: free space, do less at once, or ask the user for a sandbox with higher limits"},
		{errdefs.ErrInvalidArgument, "fix the argument the message names"},
		{errdefs.ErrUnavailable, "the sandbox or server cannot be reached right now; retry shortly, or restart_sandbox"},
		{errdefs.ErrAlreadyExists, "something is already there; choose another name or path"},
	} {
		if errors.Is(err, k.kind) {
			if !strings.Contains(msg, k.kind.Error()) {
				msg = k.kind.Error() + ": " + msg
			}
			return msg + " (" + k.hint + ")"
		}
	}
	return msg
}

// describe is Describe for an error in the taxonomy (or the API's own, already written
// for users). Any other error may carry internal state: it is logged, and the model is
// told only that something failed inside.
func (t *tools) describe(tool string, err error) string {
	var apiErr *paddock.Error
	if errors.As(err, &apiErr) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || known(err) {
		return Describe(err)
	}
	t.log.Error("mcp tool", "tool", tool, "err", err)
	return tool + ": an internal error; the server's log has the details"
}

func (t *tools) lifecycle(op string) func(context.Context, *sdk.CallToolRequest, sandboxIn) (any, error) {
	return func(ctx context.Context, _ *sdk.CallToolRequest, in sandboxIn) (any, error) {
		sb, err := t.b.Lifecycle(ctx, in.Sandbox, op)
		return sandboxOut{Sandbox: redact(sb)}, err
	}
}

func (t *tools) run(ctx context.Context, req *sdk.CallToolRequest, in runIn) (any, error) {
	timeout := in.TimeoutSeconds
	if timeout == 0 {
		timeout = defaultTimeout
	}
	var stdout, stderr tail
	tok := req.Params.GetProgressToken()
	var sent float64
	out := func(stream byte, data []byte) {
		w := &stdout
		if stream == api.StreamStderr {
			w = &stderr
		}
		w.write(data)
		if tok == nil || req.Session == nil {
			return
		}
		sent += float64(len(data))
		// A notification lost (the client went away) changes nothing of the command.
		_ = req.Session.NotifyProgress(ctx, &sdk.ProgressNotificationParams{
			ProgressToken: tok, Progress: sent, Message: errdefs.Clip(strings.ToValidUTF8(string(data), "\uFFFD"), maxProgressText),
		})
	}
	rctx, cancel := context.WithTimeout(ctx, time.Duration(timeout)*time.Second)
	defer cancel()
	start := api.StreamStart{Argv: in.Argv, Env: in.Env, Cwd: in.Cwd}
	exit, err := t.b.Run(rctx, in.Sandbox, start, []byte(in.Stdin), out)
	if err != nil && rctx.Err() != nil && ctx.Err() == nil {
		// The tool's own timeout: the command was killed.
		exit, err = api.StreamExit{ExitCode: -1, Signal: 9, Limit: api.LimitTimeout,
			Error: fmt.Sprintf("killed after timeout_seconds=%d; run it with a longer timeout (at most %d), or in the background (nohup … &)", timeout, maxTimeout)}, nil
	}
	if err != nil {
		return nil, err
	}
	r := runOut{ExitCode: exit.ExitCode, Signal: exit.Signal, Limit: exit.Limit, Error: exit.Error,
		Stdout: stdout.String(), Stderr: stderr.String(), StdoutOmitted: stdout.omitted, StderrOmitted: stderr.omitted}
	res := &sdk.CallToolResult{StructuredContent: r, Content: []sdk.Content{&sdk.TextContent{Text: r.text()}}}
	// A command that met a limit, or could not start (refused, not found), did not do
	// what was asked: an error the model acts on. A command that ran and exited non-zero
	// is a result.
	res.IsError = r.Limit != "" || r.Error != ""
	return res, nil
}

// text is a run's result as a model reads it best: status first, then the output.
func (r runOut) text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "exit_code: %d\n", r.ExitCode)
	if r.Signal != 0 {
		fmt.Fprintf(&b, "signal: %d\n", r.Signal)
	}
	if r.Limit != "" {
		fmt.Fprintf(&b, "limit: %s (the command met the sandbox's %s limit)\n", r.Limit, r.Limit)
	}
	if r.Error != "" {
		fmt.Fprintf(&b, "error: %s\n", r.Error)
	}
	for _, s := range []struct {
		name, data string
		omitted    int64
	}{{"stdout", r.Stdout, r.StdoutOmitted}, {"stderr", r.Stderr, r.StderrOmitted}} {
		if s.data == "" && s.omitted == 0 {
			continue
		}
		fmt.Fprintf(&b, "--- %s", s.name)
		if s.omitted > 0 {
			fmt.Fprintf(&b, " (output cut: the first %d bytes omitted, the last %d kept)", s.omitted, len(s.data))
		}
		b.WriteString(" ---\n")
		b.WriteString(s.data)
		if !strings.HasSuffix(s.data, "\n") {
			b.WriteString("\n")
		}
	}
	return b.String()
}

// tail keeps the last maxStreamOutput bytes written to it.
type tail struct {
	buf     []byte
	omitted int64
}

func (t *tail) write(p []byte) {
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - maxStreamOutput; over > 0 {
		t.buf = append(t.buf[:0:0], t.buf[over:]...)
		t.omitted += int64(over)
	}
}

func (t *tail) String() string {
	b := t.buf
	if t.omitted > 0 {
		// Start at a rune's start, not inside one.
		for i := 0; i < len(b) && i < utf8.UTFMax && !utf8.RuneStart(b[i]); i++ {
			b = b[1:]
			t.omitted++
		}
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}

func (t *tools) read(ctx context.Context, _ *sdk.CallToolRequest, in readIn) (any, error) {
	max := int64(in.MaxBytes)
	if max == 0 {
		max = defaultRead
	}
	data, more, err := t.b.ReadFile(ctx, in.Sandbox, in.Path, max)
	if err != nil {
		return nil, err
	}
	out := readOut{Path: in.Path, Truncated: more}
	if utf8.Valid(data) || more && utf8.Valid(trimPartialRune(data)) {
		out.Content = string(data)
	} else {
		out.ContentBase64 = base64.StdEncoding.EncodeToString(data)
		out.Note = "not UTF-8 text: content_base64 holds the bytes"
	}
	if more {
		out.Note = strings.TrimPrefix(out.Note+fmt.Sprintf("; cut after %d bytes: the file goes on (read the rest with run_command, e.g. tail -c +%d %s)", len(data), len(data)+1, in.Path), "; ")
	}
	return out, nil
}

// trimPartialRune drops a rune cut at the end of b.
func trimPartialRune(b []byte) []byte {
	for i := 0; i < utf8.UTFMax && len(b) > 0; i++ {
		if r, _ := utf8.DecodeLastRune(b); r != utf8.RuneError {
			return b
		}
		b = b[:len(b)-1]
	}
	return b
}

func (t *tools) edit(ctx context.Context, _ *sdk.CallToolRequest, in editIn) (any, error) {
	data, more, err := t.b.ReadFile(ctx, in.Sandbox, in.Path, maxEditFile)
	if err != nil {
		return nil, err
	}
	if more {
		return nil, fmt.Errorf("edit %s: the file is larger than %d bytes; change it with run_command (sed, patch): %w", in.Path, maxEditFile, errdefs.ErrLimitExceeded)
	}
	text := string(data)
	n := strings.Count(text, in.OldString)
	switch {
	case n == 0:
		return nil, fmt.Errorf("edit %s: old_string does not occur in the file; read_file it and copy the text exactly, whitespace included: %w", in.Path, errdefs.ErrInvalidArgument)
	case n > 1 && !in.ReplaceAll:
		return nil, fmt.Errorf("edit %s: old_string occurs %d times; include more surrounding text to make it unique, or set replace_all: %w", in.Path, n, errdefs.ErrInvalidArgument)
	}
	if in.ReplaceAll {
		text = strings.ReplaceAll(text, in.OldString, in.NewString)
	} else {
		text = strings.Replace(text, in.OldString, in.NewString, 1)
	}
	fi, err := t.b.WriteFile(ctx, in.Sandbox, in.Path, []byte(text), t.modeOf(ctx, in.Sandbox, in.Path))
	return editOut{File: fi, Replacements: n}, err
}

func (t *tools) readResource(ctx context.Context, req *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
	uri := req.Params.URI
	id, p, ok := strings.Cut(strings.TrimPrefix(uri, fileURIPrefix), "/files/")
	if !strings.HasPrefix(uri, fileURIPrefix) || !ok || id == "" || p == "" {
		return nil, fmt.Errorf("resource %q: want %s", uri, fileURITemplate)
	}
	data, _, err := t.b.ReadFile(ctx, id, p, maxRead)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil, sdk.ResourceNotFoundError(uri)
	}
	if err != nil {
		return nil, errors.New(t.describe("resource", err))
	}
	c := &sdk.ResourceContents{URI: uri}
	if utf8.Valid(data) {
		c.MIMEType, c.Text = "text/plain; charset=utf-8", string(data)
	} else {
		c.MIMEType, c.Blob = "application/octet-stream", data
	}
	return &sdk.ReadResourceResult{Contents: []*sdk.ResourceContents{c}}, nil
}

// redact keeps the names of a sandbox's extra environment and drops the values: they may
// be secrets, and no tool returns a secret's value.
func redact(sb api.Sandbox) api.Sandbox {
	env := make([]string, 0, len(sb.Env))
	for _, e := range sb.Env {
		name, _, _ := strings.Cut(e, "=")
		env = append(env, name+"=(redacted)")
	}
	if len(env) > 0 {
		sb.Env = env
	} else {
		sb.Env = nil
	}
	return sb
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func ptr[T any](v T) *T { return &v }

// known is whether err is in the taxonomy: its message was written for users.
func known(err error) bool {
	_, code := api.StatusOf(err)
	return code != api.CodeInternal
}

// modeOf is file p's permission bits, for an edit to keep them (a script stays
// executable); 0, the default, when they cannot be told.
func (t *tools) modeOf(ctx context.Context, id, p string) fs.FileMode {
	list, err := t.b.ListFiles(ctx, id, cmp.Or(path.Dir(p), "."))
	if err != nil {
		return 0
	}
	for _, fi := range list {
		if fi.Name == path.Base(p) && !fi.IsDir {
			if m, err := strconv.ParseUint(fi.Mode, 8, 32); err == nil {
				return fs.FileMode(m).Perm()
			}
		}
	}
	return 0
}
