package coder

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/wire"
)

// Subcommand is the paddock-agent subcommand that runs the harness.
const Subcommand = wire.CodeSubcommand

// Environment variables the harness reads.
const (
	EnvModel = "PADDOCK_AGENT_MODEL"
	EnvState = "PADDOCK_AGENT_STATE"
)

// Main runs `paddock-agent code [flags] MESSAGE…`: one turn, its events as JSON lines on
// out. It fails when the turn stopped before the model's answer.
func Main(ctx context.Context, args []string, out io.Writer) error {
	fl := flag.NewFlagSet("paddock-agent code", flag.ContinueOnError)
	fl.SetOutput(io.Discard)
	model := fl.String("model", os.Getenv(EnvModel), "the model (default $"+EnvModel+")")
	workspace := fl.String("workspace", wire.WorkspacePath, "the directory the tools work in")
	state := fl.String("state", defaultState(), "the directory that keeps the conversation, outside the workspace")
	maxSteps := fl.Int("max-steps", 40, "the most answers of the model in one turn")
	reset := fl.Bool("reset", false, "forget the conversation before this turn")
	history := fl.Bool("history", false, "print the conversation's events so far, as JSON lines, and run no turn")
	recoverOnly := fl.Bool("recover", false, "roll back a turn that was killed before it ended, so that the workspace is at the last checkpoint, and run no turn")
	apiName := fl.String("api", "", "the provider's API, openai or anthropic (default: openai when OPENAI_BASE_URL is set, else anthropic when ANTHROPIC_BASE_URL is)")
	if err := fl.Parse(args); err != nil {
		return fmt.Errorf("%v; usage: paddock-agent code [--model M] [--max-steps N] [--reset] MESSAGE, or --history, or --recover: %w", err, errdefs.ErrInvalidArgument)
	}
	var host *ServicesHost
	if u := os.Getenv(servicesEnv); u != "" {
		host = &ServicesHost{Base: u}
		if err := RestoreState(ctx, host, *state); err != nil {
			fmt.Fprintf(os.Stderr, "paddock-agent: %v; the conversation starts afresh\n", err)
		}
	}
	if *history {
		return History(*state, out)
	}
	if *recoverOnly {
		cfg := Config{Workspace: *workspace, StateDir: *state}
		if host != nil {
			cfg.Host, cfg.Keeper = host, host
		}
		return Recover(ctx, cfg, func(e Event) { _, _ = out.Write(encodeEvent(e)) })
	}
	prompt := strings.TrimSpace(strings.Join(fl.Args(), " "))
	if prompt == "" {
		return fmt.Errorf("no message; usage: paddock-agent code [--model M] MESSAGE: %w", errdefs.ErrInvalidArgument)
	}
	if *reset {
		if err := Reset(*state); err != nil {
			return fmt.Errorf("forgetting the conversation: %w", err)
		}
		if host != nil {
			if err := SaveState(ctx, host, *state); err != nil {
				return fmt.Errorf("forgetting the conversation: %w", err)
			}
		}
	}
	cfg := Config{Workspace: *workspace, StateDir: *state, Model: *model, MaxSteps: *maxSteps, API: *apiName}
	if cfg.API == "" && os.Getenv("OPENAI_BASE_URL") == "" && os.Getenv("ANTHROPIC_BASE_URL") != "" {
		cfg.API = APIAnthropic
	}
	if cfg.API == APIAnthropic {
		cfg.BaseURL, cfg.APIKey = strings.TrimRight(os.Getenv("ANTHROPIC_BASE_URL"), "/"), os.Getenv("ANTHROPIC_API_KEY")
	} else {
		cfg.BaseURL, cfg.APIKey = strings.TrimRight(os.Getenv("OPENAI_BASE_URL"), "/"), os.Getenv("OPENAI_API_KEY")
	}
	if host != nil {
		cfg.Host, cfg.Keeper = host, host
	}
	var werr error
	a, err := New(cfg, func(e Event) {
		if werr == nil {
			_, werr = out.Write(encodeEvent(e))
		}
	})
	if err != nil {
		return err
	}
	defer a.Close()
	_, err = a.Run(ctx, prompt)
	if err == nil && werr != nil {
		return fmt.Errorf("writing events: %w", werr)
	}
	return err
}

// defaultState is $PADDOCK_AGENT_STATE, or .paddock-agent in the user's home (which is
// /tmp in a sandbox: outside the workspace).
func defaultState() string {
	if s := os.Getenv(EnvState); s != "" {
		return s
	}
	home, err := os.UserHomeDir()
	if err != nil {
		home = os.TempDir()
	}
	return filepath.Join(home, ".paddock-agent")
}
