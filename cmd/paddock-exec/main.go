// Command paddock-exec is the agent's trampoline: paddock-agent starts a command through
// it when the command must join its cgroup, take the sandbox user's ids, or run under a
// file size limit or an execute limit before its first instruction (package trampoline).
// It is the agent's own code, in a binary small enough to start in a fraction of the
// agent's time; without it the agent is its own trampoline.
package main

import (
	"fmt"
	"os"

	"github.com/paddockhq/paddock/internal/agent/trampoline"
)

func main() {
	if len(os.Args) < 2 || os.Args[1] != trampoline.Flag {
		fmt.Fprintf(os.Stderr, "paddock-exec: started by paddock-agent only (%s …)\n", trampoline.Flag)
		os.Exit(2)
	}
	code, err := trampoline.Exec(os.Args[2:])
	fmt.Fprintf(os.Stderr, "paddock-exec: %v\n", err)
	os.Exit(code)
}
