// Command pause is process 1 of each pod's sandbox in the test cluster: it holds the pod's
// namespaces open, reaps the children it inherits, and exits on SIGINT or SIGTERM.
// It is static (CGO_ENABLED=0), so that an image of this one file runs.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
