package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/paddockhq/paddock"
	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/errdefs"
)

// Exit statuses of exec and shell besides the command's own.
const (
	exitTimedOut    = 124
	exitInterrupted = 130
)

// maxExecStdin bounds the stdin a one-shot exec sends: the request carries it whole, in
// base64, and the server takes 8 MiB.
const maxExecStdin = 5 << 20

// maxExecTimeout is the server's bound on a one-shot exec.
const maxExecTimeout = 10 * time.Minute

// defaultShell starts bash as a login shell, or sh where there is no bash.
var defaultShell = []string{"/bin/sh", "-c", "if command -v bash >/dev/null 2>&1; then exec bash -l; fi; exec sh -l"}

// signalExit is the shell's convention for a command that signal n killed.
func signalExit(code, sig int) int {
	if sig > 0 {
		return 128 + sig
	}
	return code
}

func newExecCommand(code *int) *cobra.Command {
	var timeout time.Duration
	var env []string
	var workdir string
	c := &cobra.Command{
		Use:   "exec ID [flags] -- COMMAND [ARG...]",
		Short: "run a command in a sandbox and wait for it",
		Long: `exec runs COMMAND in the sandbox, with stdout and stderr kept apart. When stdin is
not a terminal, it is read whole and given to the command (at most 5 MiB; use
paddock sandbox shell to stream more).

Exit status: the command's own; 128+N when signal N killed it; 124 when --timeout ended
it; 125 when paddock could not run it.`,
		Args: minArgs(2, "ID and a COMMAND"),
		RunE: func(c *cobra.Command, args []string) error {
			if timeout < 0 || timeout > maxExecTimeout {
				return fmt.Errorf("--timeout %s: want at most %s: %w", timeout, maxExecTimeout, errdefs.ErrInvalidArgument)
			}
			if timeout > 0 && timeout < time.Millisecond {
				timeout = time.Millisecond
			}
			req := api.ExecRequest{Argv: args[1:], Env: env, Cwd: workdir, TimeoutMS: timeout.Milliseconds()}
			if in := c.InOrStdin(); !isTerminal(in) {
				data, err := io.ReadAll(io.LimitReader(in, maxExecStdin+1))
				if err != nil {
					return fmt.Errorf("reading stdin: %w", err)
				}
				if len(data) > maxExecStdin {
					return fmt.Errorf("stdin is over %d MiB; use paddock sandbox shell to stream it: %w", maxExecStdin>>20, errdefs.ErrInvalidArgument)
				}
				req.Stdin = data
			}
			return runExec(c, args[0], req, timeout, code)
		},
	}
	fl := c.Flags()
	fl.DurationVar(&timeout, "timeout", 0, "kill the command after this long, like 30s (default 60s, at most 10m; exit status 124)")
	fl.StringArrayVarP(&env, "env", "e", nil, "set an environment variable NAME=VALUE (repeatable)")
	fl.StringVarP(&workdir, "workdir", "w", "", "directory to run the command in")
	return c
}

func runExec(c *cobra.Command, id string, req api.ExecRequest, timeout time.Duration, code *int) error {
	cl, err := connect()
	if err != nil {
		return err
	}
	if timeout == 0 {
		timeout = time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout+time.Minute)
	defer cancel()
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	res, err := cl.Sandbox(id).Run(ctx, req)
	if errors.Is(err, context.Canceled) {
		fmt.Fprintln(c.ErrOrStderr(), "paddock: interrupted")
		*code = exitInterrupted
		return nil
	}
	if err != nil {
		return err
	}
	stdout, stderr := c.OutOrStdout(), c.ErrOrStderr()
	if _, err := stdout.Write(res.Stdout); err != nil {
		return fmt.Errorf("writing stdout: %w", err)
	}
	if _, err := stderr.Write(res.Stderr); err != nil {
		return fmt.Errorf("writing stderr: %w", err)
	}
	if res.StdoutTruncated || res.StderrTruncated {
		fmt.Fprintln(stderr, "paddock: output truncated at 1 MiB per stream; use paddock sandbox shell for more")
	}
	switch {
	case res.TimedOut:
		fmt.Fprintf(stderr, "paddock: timed out after %s\n", timeout)
		*code = exitTimedOut
		return nil
	case res.Error != "":
		fmt.Fprintf(stderr, "paddock: %s\n", res.Error)
	}
	*code = signalExit(res.ExitCode, res.Signal)
	return nil
}

func newShellCommand(code *int) *cobra.Command {
	var env []string
	var workdir string
	c := &cobra.Command{
		Use:   "shell ID [flags] [-- COMMAND [ARG...]]",
		Short: "open an interactive shell (or run COMMAND) in a sandbox",
		Long: `shell runs COMMAND (by default a login shell: bash, or sh where there is no bash)
in the sandbox. When stdin is a terminal, the command gets a terminal of the same size;
otherwise stdin is streamed to it and closed at its end, and stdout and stderr are kept
apart.

Exit status: the command's own; 128+N when signal N killed it; 125 when paddock could
not run it.`,
		Args: minArgs(1, "ID"),
		RunE: func(c *cobra.Command, args []string) error {
			argv := args[1:]
			if len(argv) == 0 {
				argv = defaultShell
			}
			return runShell(c, args[0], api.StreamStart{Argv: argv, Env: env, Cwd: workdir}, code)
		},
	}
	fl := c.Flags()
	fl.StringArrayVarP(&env, "env", "e", nil, "set an environment variable NAME=VALUE (repeatable)")
	fl.StringVarP(&workdir, "workdir", "w", "", "directory to run the command in")
	return c
}

func runShell(c *cobra.Command, id string, start api.StreamStart, code *int) error {
	cl, err := connect()
	if err != nil {
		return err
	}
	in := c.InOrStdin()
	fd, tty := terminal(in)
	if tty {
		rows, cols := windowSize(fd)
		start.TTY = &api.TTYSize{Rows: rows, Cols: cols}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dialCtx, dialCancel := context.WithTimeout(ctx, requestTimeout)
	st, err := cl.Sandbox(id).Stream(dialCtx, start)
	dialCancel()
	if err != nil {
		return err
	}
	defer st.Close()
	sigs := make(chan os.Signal, 4)
	if tty {
		restore, err := makeRaw(fd)
		if err != nil {
			return fmt.Errorf("terminal raw mode: %w", err)
		}
		defer restore()
		signal.Notify(sigs, syscall.SIGWINCH, syscall.SIGTERM, syscall.SIGHUP)
	} else {
		signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	}
	defer signal.Stop(sigs)
	go relaySignals(ctx, st, sigs, fd, tty, cancel)
	go pumpStdin(ctx, st, in)
	exit, err := st.Copy(ctx, c.OutOrStdout(), c.ErrOrStderr())
	if errors.Is(err, context.Canceled) {
		*code = exitInterrupted
		return nil
	}
	if err != nil {
		return err
	}
	if exit.Error != "" {
		if tty {
			restoreLine(c) // the terminal is still raw: start the message on a fresh line
		}
		fmt.Fprintf(c.ErrOrStderr(), "paddock: %s\n", exit.Error)
	}
	*code = signalExit(exit.ExitCode, exit.Signal)
	return nil
}

func restoreLine(c *cobra.Command) { fmt.Fprint(c.ErrOrStderr(), "\r") }

// relaySignals resizes the remote terminal on SIGWINCH; without a terminal it forwards
// SIGINT, SIGTERM and SIGHUP to the command. With a terminal (where ^C is a byte for the
// remote side), SIGTERM and SIGHUP end the session.
func relaySignals(ctx context.Context, st *paddock.Stream, sigs <-chan os.Signal, fd int, tty bool, cancel func()) {
	for {
		select {
		case <-ctx.Done():
			return
		case s := <-sigs:
			switch {
			case s == syscall.SIGWINCH:
				rows, cols := windowSize(fd)
				_ = st.Resize(ctx, rows, cols)
			case tty:
				cancel()
			default:
				if n, ok := s.(syscall.Signal); ok {
					_ = st.Signal(ctx, int(n))
				}
			}
		}
	}
}

// pumpStdin sends stdin to the command and closes the command's stdin at its end.
func pumpStdin(ctx context.Context, st *paddock.Stream, in io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := in.Read(buf)
		if n > 0 {
			if werr := st.Write(ctx, buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			_ = st.CloseStdin(ctx)
			return
		}
	}
}
