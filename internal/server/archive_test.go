package server_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/filearchive"
	"github.com/paddockhq/paddock/internal/servertest"
)

// localTar is the tree at dir/name as a tar archive.
func localTar(t *testing.T, dir, name string) *bytes.Buffer {
	t.Helper()
	l, err := filearchive.OpenLocal(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	entries, err := filearchive.Walk(context.Background(), l, name, name)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := filearchive.Write(context.Background(), &buf, l, entries); err != nil {
		t.Fatal(err)
	}
	return &buf
}

// A tree with a file over 5 MiB goes into a sandbox as a tar and comes back out the
// same; the sandbox sees the files.
func TestFilesArchiveRoundTrip(t *testing.T) {
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "cp"}), http.StatusCreated, &sb)

	src := t.TempDir()
	big := make([]byte, 6<<20+123)
	rand.Read(big)
	must(t, os.MkdirAll(filepath.Join(src, "proj", "sub", "empty"), 0o755))
	must(t, os.WriteFile(filepath.Join(src, "proj", "big.bin"), big, 0o644))
	must(t, os.WriteFile(filepath.Join(src, "proj", "sub", "run.sh"), []byte("#!/bin/sh\necho hi\n"), 0o755))

	var res api.ArchiveResult
	servertest.Decode(t, alice.DoToken("PUT", "/api/v1/sandboxes/"+sb.ID+"/files/archive?path=/workspace/in", localTar(t, src, "proj")), http.StatusOK, &res)
	if res.Path != "in" || res.Files != 2 || res.Dirs != 3 || res.Bytes != int64(len(big))+18 {
		t.Errorf("upload: %+v, want 2 files, 3 directories in \"in\"", res)
	}
	// The upload is one checkpoint, not one per file.
	var h api.History
	servertest.Decode(t, alice.DoToken("GET", "/api/v1/sandboxes/"+sb.ID+"/history", nil), http.StatusOK, &h)
	if len(h.Checkpoints) == 0 || h.Checkpoints[0].Message != "copy into in" || h.Checkpoints[0].Changed < 3 || h.Checkpoints[0].ID != h.Current {
		t.Errorf("history after the upload: %+v, want one checkpoint \"copy into in\"", h.Checkpoints)
	}
	for _, cp := range h.Checkpoints {
		if cp.Cause == "agent-write" {
			t.Errorf("a checkpoint of one file of the upload: %+v", cp)
		}
	}
	if got := execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"sh", "-c", "stat -c %s in/proj/big.bin && in/proj/sub/run.sh"}}); string(got.Stdout) != "6291579\nhi\n" {
		t.Errorf("in the sandbox: %+v", got)
	}

	resp := alice.DoToken("GET", "/api/v1/sandboxes/"+sb.ID+"/files/archive?path=in/proj", nil)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != api.ContentTypeTar {
		t.Fatalf("download: %s %s", resp.Status, resp.Header.Get("Content-Type"))
	}
	dst := t.TempDir()
	l, err := filearchive.OpenLocal(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := filearchive.Extract(context.Background(), resp.Body, l, "."); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "proj", "big.bin")); !bytes.Equal(b, big) {
		t.Errorf("big.bin came back with %d bytes, not the same", len(b))
	}
	if fi, err := os.Stat(filepath.Join(dst, "proj", "sub", "run.sh")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("run.sh: %v, %v", fi, err)
	}
	if fi, err := os.Stat(filepath.Join(dst, "proj", "sub", "empty")); err != nil || !fi.IsDir() {
		t.Errorf("empty directory: %v", err)
	}

	missing := servertest.ErrorOf(t, alice.DoToken("GET", "/api/v1/sandboxes/"+sb.ID+"/files/archive?path=nothing", nil), http.StatusNotFound)
	if !strings.Contains(missing.Message, "nothing") {
		t.Errorf("missing path: %+v", missing)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// A hostile archive is refused with a 400 that names the entry, and nothing of it
// lands outside the directory.
func TestFilesArchiveHostile(t *testing.T) {
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "cp"}), http.StatusCreated, &sb)
	for _, tc := range []struct {
		hdr  tar.Header
		want string
	}{
		{tar.Header{Name: "../../escape.txt", Typeflag: tar.TypeReg, Size: 4}, `archive entry "../../escape.txt": ".." leads outside`},
		{tar.Header{Name: "/etc/cron.d/x", Typeflag: tar.TypeReg, Size: 4}, `archive entry "/etc/cron.d/x": absolute path`},
		{tar.Header{Name: "up", Typeflag: tar.TypeSymlink, Linkname: "../../etc"}, `archive entry "up": symlink to "../../etc" escapes the workspace`},
		{tar.Header{Name: "null", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3}, `archive entry "null": device files are refused`},
	} {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		tw.WriteHeader(&tc.hdr)
		io.WriteString(tw, strings.Repeat("x", int(tc.hdr.Size)))
		tw.Close()
		got := servertest.ErrorOf(t, alice.DoToken("PUT", "/api/v1/sandboxes/"+sb.ID+"/files/archive?path=dir", &buf), http.StatusBadRequest)
		if got.Code != api.CodeInvalidArgument || !strings.Contains(got.Message, tc.want) {
			t.Errorf("%s: %+v, want %q", tc.hdr.Name, got, tc.want)
		}
	}
	if res := execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"sh", "-c", "ls -a /workspace/dir; ls /escape.txt /workspace/escape.txt /etc/cron.d/x 2>&1"}}); strings.Contains(string(res.Stdout), "escape.txt\n") && !strings.Contains(string(res.Stdout), "No such file") {
		t.Errorf("something landed: %s", res.Stdout)
	}
}

// An upload past the sandbox's disk is stopped with a 429 that names the disk limit.
func TestFilesArchiveDiskLimit(t *testing.T) {
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "cp", Limits: api.Limits{Disk: "96M"}}), http.StatusCreated, &sb)
	pr, pw := io.Pipe()
	go func() {
		tw := tar.NewWriter(pw)
		err := tw.WriteHeader(&tar.Header{Name: "huge.bin", Typeflag: tar.TypeReg, Size: 200 << 20, Mode: 0o644})
		if err == nil {
			_, err = io.CopyN(tw, zeros{}, 200<<20)
		}
		if err == nil {
			err = tw.Close()
		}
		pw.CloseWithError(err)
	}()
	got := servertest.ErrorOf(t, alice.DoToken("PUT", "/api/v1/sandboxes/"+sb.ID+"/files/archive?path=up", pr), http.StatusTooManyRequests)
	pr.CloseWithError(io.ErrClosedPipe)
	if got.Code != api.CodeLimitExceeded || got.Limit != api.LimitDisk || !strings.Contains(got.Message, "disk limit (96MiB)") || !strings.Contains(got.Message, "huge.bin") {
		t.Errorf("200MiB into a 96MiB disk: %+v, want limit disk naming 96MiB and huge.bin", got)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// The policy decides each entry of an upload as it decides a single write: a protected
// path or a file over max_file_size is refused with a 403 naming the rule and the file.
func TestFilesArchivePolicy(t *testing.T) {
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "cp"}), http.StatusCreated, &sb)
	servertest.Decode(t, putPolicy(t, alice, sb.ID, "application/yaml", "files:\n  jail: /workspace\n  deny_write: [\"**/.env\"]\n  max_file_size: 1KiB\n"), http.StatusOK, nil)
	for _, tc := range []struct {
		name string
		size int
		want string
	}{
		{"app/.env", 4, "files.deny_write[0]"},
		{"app/big.txt", 2048, "max_file_size"},
	} {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		tw.WriteHeader(&tar.Header{Name: "app/ok.txt", Typeflag: tar.TypeReg, Size: 2, Mode: 0o644})
		io.WriteString(tw, "ok")
		tw.WriteHeader(&tar.Header{Name: tc.name, Typeflag: tar.TypeReg, Size: int64(tc.size), Mode: 0o644})
		io.WriteString(tw, strings.Repeat("x", tc.size))
		tw.Close()
		got := servertest.ErrorOf(t, alice.DoToken("PUT", "/api/v1/sandboxes/"+sb.ID+"/files/archive?path=up", &buf), http.StatusForbidden)
		if !strings.Contains(got.Message, tc.want) || !strings.Contains(got.Message, tc.name) {
			t.Errorf("%s: %+v, want the rule %s and the file named", tc.name, got, tc.want)
		}
	}
	if res := execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"ls", "-A", "/workspace/up/app"}}); string(res.Stdout) != "ok.txt\n" {
		t.Errorf("what the refused uploads left: %q", res.Stdout)
	}
}

// A capability token bounds an archive as it bounds single files: a tree under its path
// goes in and out, and an entry outside it is refused, naming the resource.
func TestFilesArchiveCapability(t *testing.T) {
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "cp"}), http.StatusCreated, &sb)
	execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"sh", "-c", "mkdir -p /workspace/pub /workspace/secret && echo p > /workspace/pub/p.txt && echo s > /workspace/secret/s.txt"}})
	capa := mintCap(t, alice, sb.ID, api.CapabilityRequest{Resource: "file:/workspace/pub", Actions: []string{"read", "write"}, TTLSeconds: 600})
	h := holder(alice, capa.Token)
	archivePath := "/api/v1/sandboxes/" + sb.ID + "/files/archive?path="

	resp := h.DoToken("GET", archivePath+"pub", nil)
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !bytes.Contains(data, []byte("pub/p.txt")) {
		t.Errorf("pub under the token: %s", resp.Status)
	}
	wantRefused(t, h.DoToken("GET", archivePath+".", nil), "outside file:/workspace/pub")

	servertest.Decode(t, h.DoToken("PUT", archivePath+"pub/in", bytes.NewReader(data)), http.StatusOK, nil)
	wantRefused(t, h.DoToken("PUT", archivePath+"secret", bytes.NewReader(data)), "outside file:/workspace/pub")
	if res := execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"sh", "-c", "cat /workspace/pub/in/pub/p.txt; ls -A /workspace/secret"}}); string(res.Stdout) != "p\ns.txt\n" {
		t.Errorf("after the uploads: %q", res.Stdout)
	}
}
