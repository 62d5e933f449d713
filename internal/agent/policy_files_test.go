package agent

import (
	"strings"
	"testing"

	pb "github.com/paddockhq/paddock/internal/wire/agentv1"
)

// filesPolicy denies writes under secret/ and any file over 100 bytes.
const filesPolicy = "files:\n  jail: /workspace\n  deny_write: [\"secret/**\"]\n  max_file_size: 100B\n"

// A policy a request carries is decided where the path really leads: a symlink from an
// allowed directory into a protected one does not get a write, a directory or a removal
// past deny_write, and a write stops at max_file_size with the old file intact. Without
// the policy (the control plane's decision on the named path alone) the same requests go
// through: that is the hole this closes.
func TestPolicyDecidedWhereThePathLeads(t *testing.T) {
	a := newCapAgent(t)
	a.plant(t, "secret/keep", "src/", "src/big")
	a.link(t, "src/link", "../secret")
	write := func(p, data, pol string) error {
		t.Helper()
		s, err := a.files.Write(ctx(t))
		mustDo(t, err)
		mustDo(t, s.Send(&pb.WriteRequest{Path: p, Data: []byte(data), Policy: pol}))
		_, err = s.CloseAndRecv()
		return err
	}

	wantOK(t, write("src/ok", "fine", filesPolicy))
	wantRefused(t, write("src/link/planted", "x", filesPolicy), "where the path leads (/workspace/secret/planted)", "files.deny_write[0]")
	wantRefused(t, write("src/big", strings.Repeat("x", 200), filesPolicy), "files.max_file_size")
	if got := a.hostRead(t, "src/big"); got != "content of src/big" {
		t.Errorf("a write refused for its size changed the file: %q", got)
	}
	_, err := a.files.Mkdir(ctx(t), &pb.MkdirRequest{Path: "src/link/d", Policy: filesPolicy})
	wantRefused(t, err, "files.deny_write[0]")
	_, err = a.files.Remove(ctx(t), &pb.RemoveRequest{Path: "src/link/keep", Policy: filesPolicy})
	wantRefused(t, err, "files.deny_write[0]")
	_, err = a.files.Move(ctx(t), &pb.MoveRequest{From: "src/ok", To: "src/link/ok", Policy: filesPolicy})
	wantRefused(t, err, "files.deny_write[0]")
	for _, p := range []string{"secret/planted", "secret/d", "secret/ok"} {
		if a.exists(p) {
			t.Errorf("%s was made through the symlink", p)
		}
	}
	if !a.exists("secret/keep") || !a.exists("src/ok") {
		t.Error("a refused removal or move removed its file")
	}
	// Reading is allowed inside the jail.
	s, err := a.files.Read(ctx(t), &pb.ReadRequest{Path: "src/link/keep", Policy: filesPolicy})
	mustDo(t, err)
	if c, err := s.Recv(); err != nil || string(c.Data) != "content of secret/keep" {
		t.Errorf("read through the link: %v %q", err, c.GetData())
	}

	// A policy this agent cannot load refuses the request.
	_, err = a.files.Mkdir(ctx(t), &pb.MkdirRequest{Path: "src/x", Policy: "files: {nope: 1}\n"})
	if err == nil || !strings.Contains(err.Error(), "does not load") || a.exists("src/x") {
		t.Errorf("a policy that does not load: %v", err)
	}
	// The control: without the policy the write through the link goes where it leads.
	wantOK(t, write("src/link/planted", "x", ""))
	if !a.exists("secret/planted") {
		t.Error("CONTROL FAILED: without a policy the write through the link did not land in secret/")
	}
}
