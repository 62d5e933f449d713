package netns

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

func newOrSkip(t *testing.T) *Handle {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("making a network namespace needs root (CAP_SYS_ADMIN); run the tests as root")
	}
	h, err := New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// A listener made in the namespace is reached from inside it (by a process that joined it,
// as a sandbox's would) and by the host's Dial into it, never from the host's own loopback.
func TestListenAndDialStayInTheNamespace(t *testing.T) {
	h := newOrSkip(t)
	l, err := h.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	addr := l.Addr().String()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			io.WriteString(c, "inside\n")
			c.Close()
		}
	}()

	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		b, _ := io.ReadAll(c)
		c.Close()
		if string(b) == "inside\n" {
			t.Fatal("the host's loopback reached a listener of the namespace")
		}
	}

	c, err := h.Dial(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(c)
	c.Close()
	if string(b) != "inside\n" {
		t.Fatalf("Dial read %q", b)
	}

	nsenter, err := exec.LookPath("nsenter")
	if err != nil {
		t.Skip("nsenter (util-linux) is not installed")
	}
	_, port, _ := net.SplitHostPort(addr)
	out, err := exec.Command(nsenter, "--net="+h.Path(), "bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/"+port+"; cat <&3").CombinedOutput()
	if err != nil {
		t.Fatalf("a process in the namespace: %v: %s", err, out)
	}
	if got := string(out); !strings.HasPrefix(got, "inside\n") {
		t.Fatalf("a process in the namespace read %q", got)
	}
}

// The namespace has its loopback up and no other interface: nothing to route anywhere.
func TestNewHasOnlyLoopback(t *testing.T) {
	h := newOrSkip(t)
	var names []string
	err := h.do(func() error {
		ifs, err := net.Interfaces()
		for _, i := range ifs {
			names = append(names, i.Name)
			if i.Name == "lo" && i.Flags&net.FlagUp == 0 {
				t.Error("lo is down")
			}
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != 1 || names[0] != "lo" {
		t.Fatalf("interfaces %v, want lo alone", names)
	}
	err = h.do(func() error {
		_, err := net.DialTimeout("tcp", "192.0.2.1:80", time.Second)
		return err
	})
	if !errors.Is(err, syscall.ENETUNREACH) {
		t.Fatalf("dial out of the namespace: %v, want network unreachable", err)
	}
}

// The thread that entered a namespace leaves it: later sockets are the host's again.
func TestThreadsReturnHome(t *testing.T) {
	h := newOrSkip(t)
	for range 50 {
		if _, err := h.Listen("127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
	}
	host, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	for range 200 {
		got, err := os.Readlink("/proc/thread-self/ns/net")
		if err != nil {
			t.Fatal(err)
		}
		if got != host {
			t.Fatalf("a thread is still in %s, not the host's %s", got, host)
		}
		time.Sleep(time.Millisecond) // let the goroutine move between threads
	}
}

func TestOpenRefusesWhatIsNotANetworkNamespace(t *testing.T) {
	for _, p := range []string{"/etc/hostname", "/proc/self/ns/uts", "/nonexistent"} {
		if h, err := Open(p); err == nil {
			h.Close()
			t.Errorf("Open(%s) succeeded", p)
		}
	}
	h, err := Open("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	h.Close()
}

// Close may race Dial and Listen (a sandbox destroyed while the proxy dials it): each
// either works in the namespace or fails, never runs elsewhere, and after Close every
// call fails. Run with -race, this is also the check that the descriptor is not read
// while it is being closed.
func TestCloseRacesDial(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("making a network namespace needs root (CAP_SYS_ADMIN); run the tests as root")
	}
	for range 20 {
		h, err := New()
		if err != nil {
			t.Fatal(err)
		}
		l, err := h.Listen("127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		done := make(chan struct{})
		go func() {
			defer close(done)
			for range 5 {
				if c, err := h.Dial(context.Background(), addr); err == nil {
					c.Close()
				}
			}
		}()
		h.Close()
		<-done
		l.Close()
		if _, err := h.Dial(context.Background(), addr); err == nil || !errors.Is(err, os.ErrClosed) {
			t.Fatalf("Dial after Close: %v, want an error saying the namespace is closed", err)
		}
	}
}
