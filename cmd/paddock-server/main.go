// Command paddock-server runs paddock's commands that link the control plane's packages
// (serve, admin, the key rotations), and every other paddock command too. `paddock`
// hands those commands to it, from beside it.
package main

import (
	"os"

	"github.com/paddockhq/paddock/internal/cli/servercmd"
)

func main() { os.Exit(servercmd.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)) }
