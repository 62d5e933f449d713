package paddock_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"strings"
	"testing"

	"github.com/paddockhq/paddock"
	"github.com/paddockhq/paddock/internal/servertest"
)

// The examples run against a real server (servertest: real sandboxes, as root), started
// once for them: serverURL is its address and token an API token of a user on it.
var serverURL, token string

func TestMain(m *testing.M) {
	os.Exit(withServer(m.Run))
}

// withServer runs run while a server is up. servertest wants a testing.TB, which only
// a test or a benchmark has: a benchmark's is borrowed, and held until run returns.
func withServer(run func() int) int {
	up, done, over := make(chan bool), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(over)
		started := false
		testing.Benchmark(func(b *testing.B) {
			if started {
				return // the benchmark asks for more rounds; one server is enough
			}
			started = true
			defer func() {
				if !b.Failed() && !b.Skipped() {
					<-done
				}
			}()
			ready := false
			defer func() { up <- ready }()
			e := servertest.Start(b)
			serverURL, token = e.URL, e.Register(b, "alice").Token
			ready = true
		})
	}()
	if !<-up {
		fmt.Fprintln(os.Stderr, "paddock_test: no server for the examples (run as root, with runc)")
	}
	code := run()
	close(done)
	<-over
	return code
}

func Example() {
	ctx := context.Background()
	c, err := paddock.Dial(ctx, serverURL, paddock.WithToken(token))
	if err != nil {
		log.Fatal(err)
	}
	sb, err := c.Sandboxes.Create(ctx, paddock.SandboxSpec{Memory: "512M"})
	if err != nil {
		log.Fatal(err)
	}
	defer sb.Delete(ctx)

	res, err := sb.Exec(ctx, []string{"sh", "-c", "echo hello from $(pwd)"})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("exit %d: %s", res.ExitCode, res.Stdout)
	// Output: exit 0: hello from /workspace
}

func ExampleSandbox_WriteFile() {
	ctx := context.Background()
	c := paddock.New(serverURL, paddock.WithToken(token))
	sb, err := c.Sandboxes.Create(ctx, paddock.SandboxSpec{})
	if err != nil {
		log.Fatal(err)
	}
	defer sb.Delete(ctx)

	if _, err := sb.WriteFile(ctx, "src/main.go", strings.NewReader("package main\n"), 0o644); err != nil {
		fmt.Println(err)
		return
	}
	files, err := sb.ListFiles(ctx, "src")
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, f := range files {
		fmt.Println(f.Path, f.Size, f.Mode)
	}
	r, err := sb.ReadFile(ctx, "/workspace/src/main.go")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer r.Close()
	io.Copy(os.Stdout, r)
	// Output:
	// src/main.go 13 0644
	// package main
}

func ExampleSandbox_Undo() {
	ctx := context.Background()
	c := paddock.New(serverURL, paddock.WithToken(token))
	sb, err := c.Sandboxes.Create(ctx, paddock.SandboxSpec{})
	if err != nil {
		log.Fatal(err)
	}
	defer sb.Delete(ctx)

	// Every write and every command that changes the workspace is a checkpoint.
	sb.WriteFile(ctx, "notes.txt", strings.NewReader("draft\n"), 0)
	sb.Exec(ctx, []string{"sh", "-c", "echo refactored > notes.txt"})

	if _, err := sb.Undo(ctx); err != nil {
		fmt.Println(err)
		return
	}
	res, _ := sb.Exec(ctx, []string{"cat", "notes.txt"})
	fmt.Print(string(res.Stdout))
	// Output: draft
}

func ExampleSandbox_PutArchive() {
	ctx := context.Background()
	c := paddock.New(serverURL, paddock.WithToken(token))
	sb, err := c.Sandboxes.Create(ctx, paddock.SandboxSpec{})
	if err != nil {
		log.Fatal(err)
	}
	defer sb.Delete(ctx)

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "site/index.html", Mode: 0o644, Size: 3})
	tw.Write([]byte("hi\n"))
	tw.Close()
	res, err := sb.PutArchive(ctx, "www", &buf)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%d file, %d bytes into %s\n", res.Files, res.Bytes, res.Path)

	// An entry that would land outside is refused, naming it.
	buf.Reset()
	tw = tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "../../etc/passwd", Mode: 0o644})
	tw.Close()
	_, err = sb.PutArchive(ctx, "www", &buf)
	fmt.Println(errors.Is(err, paddock.ErrInvalidArgument), err)
	// Output:
	// 1 file, 3 bytes into www
	// true archive entry "../../etc/passwd": ".." leads outside the directory extracted into
}

func ExampleSandbox_Stream() {
	ctx := context.Background()
	c := paddock.New(serverURL, paddock.WithToken(token))
	sb, err := c.Sandboxes.Create(ctx, paddock.SandboxSpec{})
	if err != nil {
		log.Fatal(err)
	}
	defer sb.Delete(ctx)

	st, err := sb.Stream(ctx, paddock.StreamStart{Argv: []string{"tr", "a-z", "A-Z"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer st.Close()
	st.Write(ctx, []byte("streamed stdin\n"))
	st.CloseStdin(ctx)
	exit, err := st.Copy(ctx, os.Stdout, os.Stderr)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("exit", exit.ExitCode)
	// Output:
	// STREAMED STDIN
	// exit 0
}

func ExampleError() {
	ctx := context.Background()
	c := paddock.New(serverURL, paddock.WithToken(token))
	_, err := c.Sandboxes.Get(ctx, "sb-aaaaaaaaaa")
	var pe *paddock.Error
	if errors.As(err, &pe) {
		fmt.Println(pe.Status, pe.Code, errors.Is(err, paddock.ErrNotFound))
	}

	sb, err := c.Sandboxes.Create(ctx, paddock.SandboxSpec{Disk: "96M"})
	if err != nil {
		log.Fatal(err)
	}
	defer sb.Delete(ctx)
	_, err = sb.WriteFile(ctx, "big.bin", io.LimitReader(zeros{}, 200<<20), 0)
	fmt.Println(errors.Is(err, paddock.ErrLimitExceeded))
	// Output:
	// 404 not_found true
	// true
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }
