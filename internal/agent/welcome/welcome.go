// Package welcome is the app every new sandbox runs unless told otherwise, so that a
// newcomer who opens a sandbox's URL sees something real: a page served from inside the
// sandbox that says which sandbox it is, plus the endpoints the control plane's proxy is
// tested with (JSON, a WebSocket echo, Server-Sent Events, a bulk stream).
//
// It runs as `paddock-agent welcome` (wire.WelcomeCommand) (the agent's binary is in every sandbox already) as the
// sandbox's unprivileged user, listening on the sandbox's loopback, which only the agent's
// Net.Forward reaches. Threat model: requests come from the proxy on behalf of any user the
// sandbox is shared with, so the app holds nothing secret and echoes request data (the
// X-Paddock-Role header) only HTML-escaped; query parameters are bounded.
package welcome

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/wire"
)

// Info is what the app says about where it runs.
type Info struct {
	Sandbox  string
	Hostname string
	Kernel   string
	PID      int
	Started  time.Time
	Build    string
}

// Here describes the sandbox the calling process runs in.
func Here() Info {
	host, _ := os.Hostname()
	return Info{
		Sandbox:  os.Getenv(wire.SandboxIDEnv),
		Hostname: host,
		Kernel:   kernel(),
		PID:      os.Getpid(),
		Started:  time.Now().UTC(),
		Build:    os.Getenv(wire.AppBuildEnv),
	}
}

func kernel() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "unknown"
	}
	return unix.ByteSliceToString(u.Sysname[:]) + " " + unix.ByteSliceToString(u.Release[:])
}

// Main runs the subcommand with args (those after "welcome") until ctx ends.
func Main(ctx context.Context, args []string, log *slog.Logger) error {
	fs := flag.NewFlagSet(wire.WelcomeSubcommand, flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:8080", "address to serve on (host:port)")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%s: %w: %w", wire.WelcomeSubcommand, err, errdefs.ErrInvalidArgument)
	}
	lis, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("%s: %w", wire.WelcomeSubcommand, err)
	}
	return Serve(ctx, lis, Here(), log)
}

// Serve serves the app on lis until ctx ends.
func Serve(ctx context.Context, lis net.Listener, info Info, log *slog.Logger) error {
	srv := &http.Server{
		Handler:           Handler(info),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	log.Info("welcome app serving", "addr", lis.Addr(), "sandbox", info.Sandbox)
	if err := srv.Serve(lis); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("%s: %w", wire.WelcomeSubcommand, err)
	}
	return nil
}
