// Command hello is the test pods' program (static, the whole of its image): "say TEXT"
// prints TEXT, /etc/greeting if the image has one, and the memory cgroup it runs in, then
// exits; "wait" answers each connection to TCP port 8080 with "hello from HOSTNAME" until
// SIGTERM.
package main

import (
	"fmt"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

func main() {
	if len(os.Args) > 2 && os.Args[1] == "say" {
		fmt.Println(strings.Join(os.Args[2:], " "))
		if g, err := os.ReadFile("/etc/greeting"); err == nil {
			fmt.Printf("greeting: %s\n", strings.TrimSpace(string(g)))
		}
		b, _ := os.ReadFile("/proc/self/cgroup")
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, ":memory:") {
				fmt.Println("cgroup", line)
			}
		}
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "wait" {
		l, err := net.Listen("tcp", ":8080")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		host, _ := os.Hostname()
		go func() {
			for {
				conn, err := l.Accept()
				if err != nil {
					return
				}
				fmt.Fprintf(conn, "hello from %s\n", host)
				conn.Close()
			}
		}()
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
		<-sigs
		return
	}
	fmt.Fprintln(os.Stderr, "usage: hello say TEXT | hello wait")
	os.Exit(2)
}
