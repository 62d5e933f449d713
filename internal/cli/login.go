package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/paddockhq/paddock"
	"github.com/paddockhq/paddock/internal/errdefs"
)

// requestTimeout bounds a control-plane request that is not a command's run (creating a
// sandbox, which starts it, is the slowest).
const requestTimeout = 5 * time.Minute

// connect returns a client signed in with the stored credentials (or PADDOCK_SERVER and
// PADDOCK_TOKEN).
func connect() (*paddock.Client, error) {
	creds, err := paddock.LoadCredentials()
	if err != nil {
		return nil, err
	}
	return paddock.New(creds.Server, paddock.WithToken(creds.Token)), nil
}

// loginFailed marks a 401 from POST /auth/token: a wrong password, not a missing login,
// so that message does not tell the user to run the command they just ran.
type loginFailed struct{ error }

func (e loginFailed) Unwrap() error { return e.error }

func newLoginCommand() *cobra.Command {
	var username string
	var passwordStdin bool
	c := &cobra.Command{
		Use:   "login [URL]",
		Short: "sign in to a paddock server and store an API token for it",
		Long: `login asks for your username and password, trades them for an API token named
"paddock CLI on <hostname>", and stores the server and token in
$XDG_CONFIG_HOME/paddock/credentials.json (mode 0600). URL defaults to ` + paddock.DefaultServer + `.

The environment variables PADDOCK_SERVER and PADDOCK_TOKEN override the stored ones.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			server := paddock.DefaultServer
			if len(args) == 1 {
				server = args[0]
			}
			server, err := serverURL(server)
			if err != nil {
				return err
			}
			if passwordStdin && username == "" {
				return fmt.Errorf("login: --password-stdin needs --username: %w", errdefs.ErrInvalidArgument)
			}
			password, err := askCredentials(c, &username, passwordStdin)
			if err != nil {
				return err
			}
			return login(c, server, username, password)
		},
	}
	c.Flags().StringVarP(&username, "username", "u", "", "username (default: ask)")
	c.Flags().BoolVar(&passwordStdin, "password-stdin", false, "read the password from stdin (with --username)")
	return c
}

// serverURL checks a server URL: http or https, a host, nothing after the path.
func serverURL(s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return "", fmt.Errorf("server URL %q: want http(s)://HOST[:PORT], like %s: %w", s, paddock.DefaultServer, errdefs.ErrInvalidArgument)
	}
	return strings.TrimRight(u.String(), "/"), nil
}

// askCredentials reads the username (unless given) and the password from stdin: from
// the terminal with a prompt and without echo, or a line each from a pipe.
func askCredentials(c *cobra.Command, username *string, passwordStdin bool) (string, error) {
	in := c.InOrStdin()
	prompt := c.ErrOrStderr()
	fd, tty := terminal(in)
	br := bufio.NewReader(in)
	if passwordStdin {
		data, err := io.ReadAll(io.LimitReader(br, 4<<10))
		if err != nil {
			return "", fmt.Errorf("login: reading the password: %w", err)
		}
		password := strings.TrimRight(string(data), "\r\n")
		if password == "" {
			return "", fmt.Errorf("login: no password on stdin: %w", errdefs.ErrInvalidArgument)
		}
		return password, nil
	}
	if *username == "" {
		if tty {
			fmt.Fprint(prompt, "Username: ")
		}
		line, err := readLine(br)
		if err != nil || line == "" {
			return "", fmt.Errorf("login: no username given: %w", errdefs.ErrInvalidArgument)
		}
		*username = line
	}
	if tty {
		// Echo off before the prompt shows: whatever is typed (or pasted) as soon as it
		// appears must not reach the screen.
		restore, err := noEcho(fd)
		if err != nil {
			return "", fmt.Errorf("login: turning the terminal's echo off: %w", err)
		}
		defer fmt.Fprintln(prompt)
		defer restore()
		fmt.Fprint(prompt, "Password: ")
	}
	password, err := readLine(br)
	if err != nil || password == "" {
		return "", fmt.Errorf("login: no password given: %w", errdefs.ErrInvalidArgument)
	}
	return password, nil
}

// readLine reads one line without its line ending; the last line may lack one.
func readLine(br *bufio.Reader) (string, error) {
	line, err := br.ReadString('\n')
	if err != nil && (!errors.Is(err, io.EOF) || line == "") {
		return "", err
	}
	return strings.TrimRight(line, "\r\n"), nil
}

func login(c *cobra.Command, server, username, password string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown host"
	}
	tok, err := paddock.New(server).Login(ctx, username, password, "paddock CLI on "+host)
	if errors.Is(err, errdefs.ErrUnauthenticated) {
		return loginFailed{err}
	}
	if err != nil {
		return err
	}
	if tok.Secret == "" {
		return fmt.Errorf("login: %s answered without a token: %w", server, errdefs.ErrUnavailable)
	}
	me, err := paddock.New(server, paddock.WithToken(tok.Secret)).Me(ctx)
	if err != nil {
		return err
	}
	creds := paddock.Credentials{Server: server, Token: tok.Secret, Username: me.Username, TokenID: tok.ID}
	if err := paddock.SaveCredentials(creds); err != nil {
		return err
	}
	fmt.Fprintf(c.OutOrStdout(), "signed in to %s as %s\n", server, me.Username)
	return nil
}

func newLogoutCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "logout",
		Short: "revoke the stored API token and remove the credentials file",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			creds, err := paddock.ReadCredentials()
			if errors.Is(err, errdefs.ErrNotFound) {
				fmt.Fprintln(c.OutOrStdout(), "not signed in")
				return nil
			}
			if err == nil && creds.Token != "" && creds.Server != "" {
				if err := revoke(creds); err != nil {
					fmt.Fprintf(c.ErrOrStderr(), "paddock: could not revoke the token on the server (%s); revoke it in the web UI\n", message(err))
				}
			}
			if err := paddock.RemoveCredentials(); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
				return err
			}
			if creds.Server != "" {
				fmt.Fprintf(c.OutOrStdout(), "signed out of %s\n", creds.Server)
			} else {
				fmt.Fprintln(c.OutOrStdout(), "signed out")
			}
			return nil
		},
	}
}

// revoke revokes the stored token: by its ID, or (for a file without one) by finding the
// token whose prefix the secret starts with.
func revoke(creds paddock.Credentials) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := paddock.New(creds.Server, paddock.WithToken(creds.Token))
	id := creds.TokenID
	if id == "" {
		toks, err := cl.ListTokens(ctx)
		if err != nil {
			return err
		}
		for _, t := range toks {
			if t.Prefix != "" && strings.HasPrefix(creds.Token, t.Prefix) {
				id = t.ID
			}
		}
		if id == "" {
			return fmt.Errorf("the token is not among the account's tokens: %w", errdefs.ErrNotFound)
		}
	}
	err := cl.RevokeToken(ctx, id)
	if errors.Is(err, errdefs.ErrUnauthenticated) {
		return nil // revoked already
	}
	return err
}
