// Command paddock is paddock's CLI: `paddock run` runs one command in a fresh sandbox.
package main

import (
	"os"

	"github.com/paddockhq/paddock/internal/cli"
)

func main() { os.Exit(cli.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)) }
