package cli

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/policy"
)

// ExitDenied is the exit status of policy check for a file that is not a valid policy, and
// of policy explain for a command the policy denies.
const ExitDenied = 1

func newPolicyCommand(code *int) *cobra.Command {
	c := &cobra.Command{
		Use:   "policy",
		Short: "check a policy file, and see what it would decide",
		Long: `A policy file (YAML) says which commands may run, which files may be written, which
hosts may be reached and which resource limits apply. check validates one; explain
says what it would decide for a command, and why.`,
	}
	c.AddCommand(newPolicyCheckCommand(code), newPolicyExplainCommand(code))
	return c
}

func newPolicyCheckCommand(code *int) *cobra.Command {
	return &cobra.Command{
		Use:   "check FILE",
		Short: "validate a policy file; a mistake is reported with its line and field",
		Long: `check loads FILE ("-" for standard input) as paddock would, and prints "FILE: ok" and
a summary of its rules, or the first mistake, with its line and field.

Exit status: 0 when the policy is valid, 1 when it is not, 125 when FILE cannot be read.`,
		Args: exactArgs(1, "one FILE"),
		RunE: func(c *cobra.Command, args []string) error {
			p, err := readPolicy(c, args[0])
			if errors.As(err, new(*policy.LoadError)) {
				fmt.Fprintf(c.ErrOrStderr(), "paddock: %s\n", message(err))
				*code = ExitDenied
				return nil
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(c.OutOrStdout(), "%s: ok\n%s\n", args[0], p.Summary())
			return nil
		},
	}
}

func newPolicyExplainCommand(code *int) *cobra.Command {
	c := &cobra.Command{
		Use:   "explain FILE -- COMMAND [ARG...]",
		Short: "say what a policy decides for a command, command by command, and why",
		Long: `explain decides COMMAND under the policy in FILE and prints, for every simple command
found in it (in pipelines, lists, substitutions, sh -c strings, behind wrappers like
sudo or env), the decision, the rule that made it and the reason.

One word after -- is a shell script, parsed as bash:
  paddock policy explain policy.yaml -- 'curl -fsSL https://x | sh'
Several words are an argv, run with no shell in between:
  paddock policy explain policy.yaml -- rm -rf /

Exit status: 0 when every command is allowed, 1 when one is denied, 125 when FILE
cannot be read or is not a valid policy (see paddock policy check).`,
		Args: cobra.ArbitraryArgs,
		RunE: func(c *cobra.Command, args []string) error {
			if len(args) > 1 && args[1] == "--" {
				args = append(args[:1:1], args[2:]...)
			}
			if len(args) < 2 {
				return fmt.Errorf("policy explain: no command given (paddock policy explain FILE -- COMMAND [ARG...]): %w", errdefs.ErrInvalidArgument)
			}
			p, err := readPolicy(c, args[0])
			if err != nil {
				return err
			}
			cmd := args[1:]
			var ds []policy.CommandDecision
			var overall policy.Decision
			if len(cmd) == 1 {
				ds, overall = p.ExplainScript(cmd[0]), p.ShellScript(cmd[0])
			} else {
				ds, overall = p.ExplainShell(cmd), p.Shell(cmd)
			}
			printDecisions(c.OutOrStdout(), ds, overall)
			if !overall.Allow {
				*code = ExitDenied
			}
			return nil
		},
	}
	c.Flags().SetInterspersed(false)
	return c
}

func printDecisions(w io.Writer, ds []policy.CommandDecision, overall policy.Decision) {
	if len(ds) > 0 {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "DECISION\tRULE\tCOMMAND\tREASON")
		for _, d := range ds {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", verb(d.Allow), d.Rule, oneLine(d.Command), oneLine(d.Reason))
		}
		tw.Flush()
	}
	verdict := "allowed"
	if !overall.Allow {
		verdict = "denied"
	}
	fmt.Fprintf(w, "%s by %s: %s\n", verdict, overall.Rule, oneLine(overall.Reason))
}

func verb(allow bool) string {
	if allow {
		return "allow"
	}
	return "deny"
}

// oneLine keeps a table row on one line: a command with a newline or tab in it (a
// here-document) is printed quoted.
func oneLine(s string) string {
	if strings.ContainsAny(s, "\n\r\t") {
		return strconv.Quote(s)
	}
	return s
}

// readPolicy reads and loads a policy file; "-" is standard input.
func readPolicy(c *cobra.Command, file string) (*policy.Policy, error) {
	data, source, err := readPolicyData(c, file)
	if err != nil {
		return nil, err
	}
	return policy.Load(data, source)
}

// readPolicyData reads a policy file ("-": standard input) and names its source. The read
// is bounded, so pointing it at /dev/zero is a clear error rather than a hang.
func readPolicyData(c *cobra.Command, file string) (data []byte, source string, err error) {
	r := c.InOrStdin()
	source = "stdin"
	if file != "-" {
		f, err := os.Open(file)
		if err != nil {
			var pe *fs.PathError
			if errors.As(err, &pe) {
				err = pe.Err
			}
			return nil, file, fmt.Errorf("%s: %v: %w", file, err, errdefs.ErrInvalidArgument)
		}
		defer f.Close()
		r, source = f, file
	}
	data, err = io.ReadAll(io.LimitReader(r, policy.MaxFileSize+1))
	if err != nil {
		return nil, source, fmt.Errorf("%s: %v: %w", source, err, errdefs.ErrInvalidArgument)
	}
	return data, source, nil
}
