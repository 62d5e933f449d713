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
	EnvModel    = wire.AgentModelEnv
	EnvProvider = wire.AgentProviderEnv
	EnvState    = "PADDOCK_AGENT_STATE"
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
	provider := fl.String("provider", os.Getenv(EnvProvider), "the gateway's provider to ask, by name, one of $"+wire.AgentProvidersEnv+" (default $"+EnvProvider+", unless --api is given)")
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
	if explicit(fl, "api") && !explicit(fl, "provider") {
		*provider = "" // a run's --api overrides the chosen provider
	}
	if *provider != "" {
		if err := useProvider(&cfg, *provider); err != nil {
			return err
		}
	} else {
		useEnvProvider(&cfg)
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

// useEnvProvider points cfg at the provider of its API that the sandbox's SDK variables
// name: the gateway's first of that kind.
func useEnvProvider(cfg *Config) {
	if cfg.API == "" && os.Getenv("OPENAI_BASE_URL") == "" && os.Getenv("ANTHROPIC_BASE_URL") != "" {
		cfg.API = APIAnthropic
	}
	if cfg.API == APIAnthropic {
		cfg.BaseURL, cfg.APIKey = strings.TrimRight(os.Getenv("ANTHROPIC_BASE_URL"), "/"), os.Getenv("ANTHROPIC_API_KEY")
	} else {
		cfg.BaseURL, cfg.APIKey = strings.TrimRight(os.Getenv("OPENAI_BASE_URL"), "/"), os.Getenv("OPENAI_API_KEY")
	}
}

// useProvider points cfg at the gateway's provider called name, whatever its place in the
// server's configuration: its path under the services URL, and the API its kind speaks.
func useProvider(cfg *Config, name string) error {
	services := strings.TrimRight(os.Getenv(servicesEnv), "/")
	var names []string
	for _, pair := range strings.Split(os.Getenv(wire.AgentProvidersEnv), ",") {
		n, kind, ok := strings.Cut(pair, "=")
		if !ok {
			continue
		}
		names = append(names, n)
		if n != name {
			continue
		}
		if services == "" {
			return fmt.Errorf("--provider %s: $%s is not set, so the gateway cannot be reached: %w", name, servicesEnv, errdefs.ErrUnavailable)
		}
		// The gateway drops whatever key comes and adds the platform's.
		cfg.API, cfg.APIKey = kind, "paddock-gateway-adds-the-key"
		cfg.BaseURL = services + "/gateway/" + name
		if kind == APIOpenAI {
			cfg.BaseURL += "/v1"
		}
		return nil
	}
	if len(names) == 0 {
		return fmt.Errorf("--provider %s: the server configures no gateway providers: %w", errdefs.Clip(name, 64), errdefs.ErrInvalidArgument)
	}
	return fmt.Errorf("--provider %s: not one of the gateway's providers (%s): %w", errdefs.Clip(name, 64), strings.Join(names, ", "), errdefs.ErrInvalidArgument)
}

// explicit reports whether the run's flags gave name.
func explicit(fl *flag.FlagSet, name string) bool {
	set := false
	fl.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
