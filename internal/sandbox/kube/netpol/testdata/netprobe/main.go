// netprobe serves and probes connections from inside a test pod:
//
//	netprobe serve PORT...    answer every TCP connection on each PORT with "HELLO <port>"
//	netprobe tcp HOST:PORT    connect; print "REACHED <what it read>" and exit 0, or "UNREACHED <error>" and exit 1
//	netprobe udp HOST:PORT    send a datagram; print "REACHED <the answer>" and exit 0, or "UNREACHED <error>" and exit 1
package main

import (
	"fmt"
	"net"
	"os"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fail("usage: netprobe serve PORT... | tcp HOST:PORT | udp HOST:PORT")
	}
	switch os.Args[1] {
	case "serve":
		for _, port := range os.Args[2:] {
			l, err := net.Listen("tcp", ":"+port)
			if err != nil {
				fail(err.Error())
			}
			go serve(l, port)
		}
		select {}
	case "tcp", "udp":
		if len(os.Args) != 3 {
			fail("usage: netprobe tcp|udp HOST:PORT")
		}
		probe(os.Args[1], os.Args[2])
	default:
		fail("unknown command " + os.Args[1])
	}
}

func serve(l net.Listener, port string) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		fmt.Fprintf(c, "HELLO %s\n", port)
		c.Close()
	}
}

func probe(network, addr string) {
	c, err := net.DialTimeout(network, addr, 5*time.Second)
	if err != nil {
		unreached(err)
	}
	defer c.Close()
	if network == "udp" {
		if _, err := c.Write([]byte("ping\n")); err != nil {
			unreached(err)
		}
	}
	// A TCP connection counts once made; what the other side says (if anything) is shown.
	_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	if network == "udp" && err != nil {
		unreached(err)
	}
	fmt.Printf("REACHED %q\n", buf[:n])
}

func unreached(err error) {
	fmt.Printf("UNREACHED %v\n", err)
	os.Exit(1)
}

func fail(msg string) {
	fmt.Fprintln(os.Stderr, msg)
	os.Exit(2)
}
