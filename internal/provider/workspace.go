package provider

import (
	"context"
	"fmt"
	"strings"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// Runner runs one command inside the sandbox, in dir (relative to the workspace), and
// returns how it ended. An error means it could not be run at all (refused by policy, the
// sandbox gone); a command that ran and failed is a Result with its exit code.
type Runner interface {
	Run(ctx context.Context, dir string, c Command) (Result, error)
}

// Streamer is a Runner that can also hand over a command's output as it comes, which
// Run uses for a step's commands (those without stdin) so that their log is live.
type Streamer interface {
	Stream(ctx context.Context, dir string, c Command, out func(stream string, data []byte)) (Result, error)
}

// Result is how a command ended.
type Result struct {
	ExitCode int
	Stdout   []byte
	Stderr   []byte
	// Error says why it ended other than by exiting (a limit, a timeout).
	Error string
	// Limit names the limit that ended it (api.LimitTimeout, …), if one did.
	Limit string
}

// Workspace reads and writes the sandbox's workspace. Names are relative to it.
type Workspace interface {
	// ReadFile is the file's content; ErrNoFile when there is no such file.
	ReadFile(ctx context.Context, name string) ([]byte, error)
	WriteFile(ctx context.Context, name string, data []byte) error
}

// ErrNoFile is a file the workspace does not hold. It is apart from the sandbox itself
// not being found, which must not read as a missing file.
var ErrNoFile = fmt.Errorf("no such file: %w", errdefs.ErrNotFound)

// exitMissing is the exit code of ReadFile's command for a missing file.
const exitMissing = 66

// ShellWorkspace is a Workspace that reads and writes through a Runner, so every access
// goes through the same exec path, policy and limits as the steps.
type ShellWorkspace struct{ Runner Runner }

func (w ShellWorkspace) ReadFile(ctx context.Context, name string) ([]byte, error) {
	res, err := w.Runner.Run(ctx, ".", Command{Name: "read " + name,
		Argv: []string{"sh", "-c", fmt.Sprintf(`test -f "$1" || exit %d; exec cat -- "$1"`, exitMissing), "sh", name}})
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	switch res.ExitCode {
	case 0:
		return res.Stdout, nil
	case exitMissing:
		return nil, fmt.Errorf("%s: %w", name, ErrNoFile)
	}
	return nil, fmt.Errorf("read %s: %s: %w", name, failure(res), errdefs.ErrUnavailable)
}

// Projects lists the workspace's top-level directories (hidden ones aside) that hold one
// of markers.
func (w ShellWorkspace) Projects(ctx context.Context, markers []string) ([]string, error) {
	res, err := w.Runner.Run(ctx, ".", Command{Name: "find projects", Argv: append([]string{"sh", "-c",
		`for d in */; do d=${d%/}; for m in "$@"; do if [ -f "$d/$m" ]; then echo "$d"; break; fi; done; done`, "sh"}, markers...)})
	if err != nil {
		return nil, fmt.Errorf("find projects: %w", err)
	}
	if res.ExitCode != 0 {
		return nil, fmt.Errorf("find projects: %s: %w", failure(res), errdefs.ErrUnavailable)
	}
	var dirs []string
	for _, d := range strings.Split(strings.TrimSpace(string(res.Stdout)), "\n") {
		if c, err := CleanDir(d); d != "" && err == nil && c == d {
			dirs = append(dirs, d)
		}
	}
	return dirs, nil
}

func (w ShellWorkspace) WriteFile(ctx context.Context, name string, data []byte) error {
	res, err := w.Runner.Run(ctx, ".", Command{Name: "write " + name, Stdin: data,
		Argv: []string{"sh", "-c", `mkdir -p -- "$(dirname -- "$1")" && cat > "$1"`, "sh", name}})
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("write %s: %s: %w", name, failure(res), errdefs.ErrUnavailable)
	}
	return nil
}

// failure says how a failed command ended, with the end of what it printed.
func failure(res Result) string {
	msg := fmt.Sprintf("exit status %d", res.ExitCode)
	if res.Error != "" {
		msg = res.Error
	}
	if tail := lastLine(res.Stderr); tail != "" {
		msg += ": " + tail
	}
	return msg
}

// lastLine is the last lines of b (at most three): where tools say what went wrong. A
// first line starting "error" before them leads: cargo says what failed first and then
// adds advice.
func lastLine(b []byte) string {
	all := strings.Split(strings.TrimSpace(string(b)), "\n")
	lines := all[max(0, len(all)-3):]
	for _, l := range all[:len(all)-len(lines)] {
		if strings.HasPrefix(l, "error") {
			lines = append([]string{l, "…"}, lines...)
			break
		}
	}
	for i := range lines {
		lines[i] = strings.TrimSpace(lines[i])
	}
	return strings.Join(lines, " / ")
}
