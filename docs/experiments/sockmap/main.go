// Command sockmap measures what an eBPF sockmap shortcut would do for the egress proxy,
// against today's splice relay and a direct connection, on loopback. It is the
// experiment behind the note on the egress proxy's throughput in docs/limitations.md; paddock does not
// use sockmaps (see why below). Run it as root:
//
//	go run . -mode direct                   # the client reads the body from the server
//	go run . -mode splice                   # through a relay that splices, as internal/egress does
//	go run . -mode sockmap                  # the relay's writes go straight into the client's receive queue (sk_msg)
//	go run . -mode skb                      # the relay's upstream socket feeds the client's queue (sk_skb verdict)
//	go run . -mode sockmap -stall 3s        # the client stops reading: what the relay managed to push
//
// The client, the relay and the server are in one process and talk over 127.0.0.1, as the
// sandbox, the proxy and an upstream would over loopback. In sockmap mode the relay puts
// its socket to the client in a sockhash whose sk_msg program redirects every send to the
// client socket's ingress (BPF_F_INGRESS), keyed by the client's port, so the bytes skip
// the loopback TCP hop. The finding: about 0.9x of direct against about 0.5x for splice,
// but with no flow control. Bytes redirected to a socket's ingress are not charged to its
// receive buffer, so with -stall the relay pushes the whole body into kernel memory
// (TCP's "mem" in /proc/net/sockstat, in pages) where splice stops at a few MiB. In skb
// mode the kernel does respect the receive buffer, but it moves the bytes from a work
// queue, so the relay's FIN can reach the client before the last of them (a short read).
package main

import (
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

var (
	mode  = flag.String("mode", "direct", "direct, splice, sockmap or skb")
	size  = flag.Int64("size", 256<<20, "body size in bytes")
	runs  = flag.Int("n", 9, "downloads")
	stall = flag.Duration("stall", 0, "with a relay: the client reads nothing for this long, once")
)

// shortcut holds the maps: clients, the sandbox-side sockets by their local port (the key
// the programs compute); relays, the sockets whose traffic is redirected; pairs (skb mode),
// a relay socket's cookie to its client's key.
type shortcut struct {
	clients, relays, pairs *ebpf.Map
}

func main() {
	flag.Parse()
	body := make([]byte, *size)
	server, err := net.Listen("tcp", "127.0.0.1:0")
	check(err)
	go serve(server, body)
	target := server.Addr().String()
	var relayed atomic.Int64
	clients := &registry{conns: map[int]*net.TCPConn{}}
	if *mode != "direct" {
		var sc *shortcut
		switch *mode {
		case "sockmap":
			sc = newShortcut(msgProgram)
		case "skb":
			sc = newShortcut(skbProgram)
		case "splice":
		default:
			log.Fatalf("unknown -mode %q", *mode)
		}
		relay, err := net.Listen("tcp", "127.0.0.1:0")
		check(err)
		go serveRelay(relay, target, sc, clients, &relayed)
		target = relay.Addr().String()
	}
	var rates []float64
	buf := make([]byte, 256<<10)
	for i := 0; i < *runs; i++ {
		start := time.Now()
		c, err := net.Dial("tcp", target)
		check(err)
		tc := c.(*net.TCPConn)
		clients.add(tc)
		_, err = c.Write([]byte("g"))
		check(err)
		if *stall > 0 && i == 0 && *mode != "direct" {
			time.Sleep(*stall)
			fmt.Printf("%s: after the client read nothing for %s the relay had sent %d bytes; %s", *mode, *stall, relayed.Load(), tcpMem())
		}
		var total int64
		for {
			k, err := c.Read(buf)
			total += int64(k)
			if errors.Is(err, io.EOF) {
				break
			}
			check(err)
		}
		c.Close()
		if total != *size {
			fmt.Printf("%s: short read: %d of %d bytes\n", *mode, total, *size)
			os.Exit(1)
		}
		rates = append(rates, float64(total)/(1<<20)/time.Since(start).Seconds())
	}
	slices.Sort(rates)
	fmt.Printf("%s: median %.0f MiB/s over %d downloads of %d bytes\n", *mode, rates[len(rates)/2], *runs, *size)
}

func serve(l net.Listener, body []byte) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			var b [1]byte
			c.Read(b[:])
			c.Write(body)
		}()
	}
}

// registry lets the relay find the client's socket, which in paddock would be the
// sandbox's (found by a sock_ops program; here the client registers it itself).
type registry struct {
	mu    sync.Mutex
	conns map[int]*net.TCPConn
}

func (r *registry) add(c *net.TCPConn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.conns[c.LocalAddr().(*net.TCPAddr).Port] = c
}

func (r *registry) wait(port int) *net.TCPConn {
	for {
		r.mu.Lock()
		c := r.conns[port]
		r.mu.Unlock()
		if c != nil {
			return c
		}
		time.Sleep(100 * time.Microsecond)
	}
}

func serveRelay(l net.Listener, upstream string, sc *shortcut, clients *registry, relayed *atomic.Int64) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			down := c.(*net.TCPConn)
			u, err := net.Dial("tcp", upstream)
			check(err)
			up := u.(*net.TCPConn)
			defer down.Close()
			defer up.Close()
			if sc != nil {
				port := down.RemoteAddr().(*net.TCPAddr).Port
				client := clients.wait(port)
				check(sc.clients.Update(clientKey(port), fd(client), ebpf.UpdateAny))
				if *mode == "skb" {
					check(sc.pairs.Update(cookie(up), clientKey(port), ebpf.UpdateAny))
					check(sc.relays.Update(cookie(up), fd(up), ebpf.UpdateAny))
					go spliceAll(up, down, nil)
					waitClosed(up)
					down.CloseWrite()
					return
				}
				check(sc.relays.Update(cookie(down), fd(down), ebpf.UpdateAny))
			}
			go spliceAll(up, down, nil)
			spliceAll(down, up, relayed)
		}()
	}
}

// clientKey is the key of the client's socket: its port as the sk_msg context's
// remote_port reads it (network order, in the word's upper half).
func clientKey(port int) uint64 {
	return uint64(uint16(port)>>8|uint16(port)<<8) << 16
}

// spliceAll moves src to dst through a pipe until src's EOF, then closes dst's write side.
func spliceAll(dst, src *net.TCPConn, count *atomic.Int64) {
	var p [2]int
	check(syscall.Pipe2(p[:], syscall.O_CLOEXEC|syscall.O_NONBLOCK))
	defer syscall.Close(p[0])
	defer syscall.Close(p[1])
	unix.FcntlInt(uintptr(p[0]), unix.F_SETPIPE_SZ, 1<<20)
	rs, _ := src.SyscallConn()
	rd, _ := dst.SyscallConn()
	const flags = unix.SPLICE_F_MOVE | unix.SPLICE_F_NONBLOCK
	for {
		var got int64
		var err error
		rs.Read(func(f uintptr) bool {
			got, err = syscall.Splice(int(f), nil, p[1], nil, 1<<20, flags)
			return err != syscall.EAGAIN
		})
		if err != nil || got == 0 {
			break
		}
		for got > 0 {
			var put int64
			rd.Write(func(f uintptr) bool {
				put, err = syscall.Splice(p[0], nil, int(f), nil, int(got), flags)
				return err != syscall.EAGAIN
			})
			if err != nil {
				log.Fatalf("splice to %s: %v", dst.RemoteAddr(), err)
			}
			got -= put
			if count != nil {
				count.Add(put)
			}
		}
	}
	dst.CloseWrite()
}

// waitClosed waits for the upstream to close: with an sk_skb verdict program on the
// socket, a read returns 0 at once, so its TCP state says it.
func waitClosed(c *net.TCPConn) {
	rc, _ := c.SyscallConn()
	for {
		var state uint8
		rc.Control(func(f uintptr) {
			if ti, err := unix.GetsockoptTCPInfo(int(f), unix.IPPROTO_TCP, unix.TCP_INFO); err == nil {
				state = ti.State
			}
		})
		if state == 8 { // TCP_CLOSE_WAIT
			return
		}
		time.Sleep(200 * time.Microsecond)
	}
}

func fd(c *net.TCPConn) uint32 {
	rc, _ := c.SyscallConn()
	var n uint32
	rc.Control(func(f uintptr) { n = uint32(f) })
	return n
}

func cookie(c *net.TCPConn) uint64 {
	rc, _ := c.SyscallConn()
	var v [8]byte
	rc.Control(func(f uintptr) {
		l := uint32(len(v))
		_, _, errno := syscall.Syscall6(syscall.SYS_GETSOCKOPT, f, syscall.SOL_SOCKET, unix.SO_COOKIE, uintptr(unsafe.Pointer(&v[0])), uintptr(unsafe.Pointer(&l)), 0)
		if errno != 0 {
			log.Fatalf("SO_COOKIE: %v", errno)
		}
	})
	return binary.NativeEndian.Uint64(v[:])
}

func newShortcut(program func(*shortcut) (*ebpf.Program, ebpf.AttachType)) *shortcut {
	newMap := func(t ebpf.MapType, value uint32) *ebpf.Map {
		m, err := ebpf.NewMap(&ebpf.MapSpec{Type: t, KeySize: 8, ValueSize: value, MaxEntries: 1024})
		check(err)
		return m
	}
	sc := &shortcut{clients: newMap(ebpf.SockHash, 4), relays: newMap(ebpf.SockHash, 4), pairs: newMap(ebpf.Hash, 8)}
	prog, attach := program(sc)
	check(link.RawAttachProgram(link.RawAttachProgramOptions{Target: sc.relays.FD(), Program: prog, Attach: attach}))
	return sc
}

// msgProgram redirects every message the relay sends to its client into the client
// socket's ingress: msg_redirect_hash(msg, clients, &remote_port, BPF_F_INGRESS).
func msgProgram(sc *shortcut) (*ebpf.Program, ebpf.AttachType) {
	const remotePort = 60 // offsetof(struct sk_msg_md, remote_port)
	insns := asm.Instructions{
		asm.LoadMem(asm.R2, asm.R1, remotePort, asm.Word),
		asm.StoreMem(asm.RFP, -8, asm.R2, asm.DWord),
		asm.LoadMapPtr(asm.R2, sc.clients.FD()),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, -8),
		asm.Mov.Imm(asm.R4, 1), // BPF_F_INGRESS
		asm.FnMsgRedirectHash.Call(),
		asm.Return(),
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.SkMsg, Instructions: insns, License: "GPL"})
	check(err)
	return prog, ebpf.AttachSkMsgVerdict
}

// skbProgram redirects what the relay's upstream socket receives into its client's
// ingress: sk_redirect_hash(skb, clients, pairs[cookie(skb)], BPF_F_INGRESS).
func skbProgram(sc *shortcut) (*ebpf.Program, ebpf.AttachType) {
	insns := asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.FnGetSocketCookie.Call(),
		asm.StoreMem(asm.RFP, -8, asm.R0, asm.DWord),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -8),
		asm.LoadMapPtr(asm.R1, sc.pairs.FD()),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "pass"),
		asm.LoadMem(asm.R1, asm.R0, 0, asm.DWord),
		asm.StoreMem(asm.RFP, -16, asm.R1, asm.DWord),
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.LoadMapPtr(asm.R2, sc.clients.FD()),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, -16),
		asm.Mov.Imm(asm.R4, 1), // BPF_F_INGRESS
		asm.FnSkRedirectHash.Call(),
		asm.Return(),
		asm.Mov.Imm(asm.R0, 1).WithSymbol("pass"), // SK_PASS
		asm.Return(),
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.SkSKB, AttachType: ebpf.AttachSkSKBVerdict, Instructions: insns, License: "GPL"})
	check(err)
	return prog, ebpf.AttachSkSKBVerdict
}

// tcpMem is the TCP line of /proc/net/sockstat: "mem" is the kernel memory TCP holds, in pages.
func tcpMem() string {
	b, err := os.ReadFile("/proc/net/sockstat")
	check(err)
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "TCP:") {
			return line + "\n"
		}
	}
	return "\n"
}

func check(err error) {
	if err != nil {
		log.Fatalf("%+v", err)
	}
}
