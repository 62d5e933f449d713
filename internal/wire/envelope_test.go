package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/paddockhq/paddock/internal/errdefs"
)

func validEnvelope() *Envelope {
	return &Envelope{
		Version:    EnvelopeVersion,
		SandboxID:  "sb-1",
		Tier:       TierContainer,
		Workspace:  "/workspace",
		ListenFD:   3,
		Env:        []string{"PATH=/usr/bin", "HOME=/tmp"},
		Main:       &Command{Argv: []string{"sh", "-c", "echo hi"}, Cwd: "/workspace"},
		RunAs:      &User{UID: 1000, GID: 1000},
		HistoryDir: "/.paddock/history",
		// set, so that the round trip covers it
		FileSizeLimit: 1 << 20,
	}
}

func TestEnvelopeRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	in := validEnvelope()
	if err := WriteEnvelope(&buf, in); err != nil {
		t.Fatal(err)
	}
	if n := binary.BigEndian.Uint32(buf.Bytes()[:4]); int(n) != buf.Len()-4 {
		t.Fatalf("length prefix %d, body %d bytes", n, buf.Len()-4)
	}
	out, err := ReadEnvelope(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip changed the envelope:\n in %+v\nout %+v", in, out)
	}
}

func TestEnvelopeListensOnAnAddressInAPod(t *testing.T) {
	e := validEnvelope()
	e.ListenFD, e.ListenAddr = 0, ":7443"
	var buf bytes.Buffer
	if err := WriteEnvelope(&buf, e); err != nil {
		t.Fatalf("a pod's envelope: %v", err)
	}
	if out, err := ReadEnvelope(&buf); err != nil || out.ListenAddr != ":7443" {
		t.Fatalf("read back %+v, %v", out, err)
	}
}

func TestEnvelopeRejects(t *testing.T) {
	tests := []struct {
		name  string
		edit  func(*Envelope)
		field string
	}{
		{"future version", func(e *Envelope) { e.Version = 2 }, "version"},
		{"bad id", func(e *Envelope) { e.SandboxID = "../etc" }, "sandbox_id"},
		{"upper-case id", func(e *Envelope) { e.SandboxID = "SB" }, "sandbox_id"},
		{"bad tier", func(e *Envelope) { e.Tier = "vm" }, "tier"},
		{"relative workspace", func(e *Envelope) { e.Workspace = "ws" }, "workspace"},
		{"stdio as listener", func(e *Envelope) { e.ListenFD = 1 }, "listen_fd"},
		{"both listeners", func(e *Envelope) { e.ListenAddr = ":7443" }, "listen_addr"},
		{"address without port", func(e *Envelope) { e.ListenFD, e.ListenAddr = 0, "10.0.0.1" }, "listen_addr"},
		{"port out of range", func(e *Envelope) { e.ListenFD, e.ListenAddr = 0, ":70000" }, "listen_addr"},
		{"process config outside process tier", func(e *Envelope) { e.Process = &ProcessConfinement{} }, "process"},
		{"process tier without config", func(e *Envelope) { e.Tier = TierProcess }, "process"},
		{"env without =", func(e *Envelope) { e.Env = []string{"PATH"} }, "env[0]"},
		{"env with empty name", func(e *Envelope) { e.Env = []string{"=x"} }, "env[0]"},
		{"NUL in env", func(e *Envelope) { e.Env = []string{"A=b\x00c"} }, "env"},
		{"empty argv", func(e *Envelope) { e.Main.Argv = nil }, "argv"},
		{"commands as root", func(e *Envelope) { e.RunAs = &User{UID: 0, GID: 5} }, "run_as"},
		{"NUL in argv", func(e *Envelope) { e.Main.Argv = []string{"sh\x00"} }, "argv"},
		{"relative history", func(e *Envelope) { e.HistoryDir = "history" }, "history_dir"},
		{"history in the workspace", func(e *Envelope) { e.HistoryDir = "/workspace/.history" }, "history_dir"},
		{"history is the workspace", func(e *Envelope) { e.HistoryDir = "/workspace/" }, "history_dir"},
		{"history without run_as", func(e *Envelope) { e.RunAs = nil }, "history_dir"},
		{"negative file size limit", func(e *Envelope) { e.FileSizeLimit = -1 }, "file_size_limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := validEnvelope()
			tt.edit(e)
			err := WriteEnvelope(new(bytes.Buffer), e)
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("err = %v, want invalid argument", err)
			}
			if !strings.Contains(err.Error(), "field "+tt.field) {
				t.Fatalf("err = %q does not name field %q", err, tt.field)
			}
		})
	}
}

func TestReadEnvelopeFraming(t *testing.T) {
	frame := func(n uint32, body string) []byte {
		b := binary.BigEndian.AppendUint32(nil, n)
		return append(b, body...)
	}
	tests := []struct {
		name string
		in   []byte
		want string
	}{
		{"empty", nil, "read envelope length"},
		{"short prefix", []byte{0, 0}, "read envelope length"},
		{"oversized", frame(MaxEnvelopeSize+1, ""), "over the"},
		{"huge", frame(0xffffffff, ""), "over the"},
		{"truncated body", frame(100, `{"version":1}`), "read envelope body"},
		{"not json", frame(3, "abc"), "decode envelope"},
		{"unknown field", frame(14, `{"versionx":1}`), "unknown field"},
		{"trailing", frame(4, `{}{}`), "trailing data"},
		{"null", frame(4, `null`), "field version"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ReadEnvelope(bytes.NewReader(tt.in))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tt.want)
			}
		})
	}
}

func TestParseTier(t *testing.T) {
	for _, tier := range Tiers {
		if got, err := ParseTier(string(tier)); err != nil || got != tier {
			t.Errorf("ParseTier(%q) = %q, %v", tier, got, err)
		}
	}
	if _, err := ParseTier("docker"); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "microvm, container or process") {
		t.Errorf("ParseTier(docker) = %v", err)
	}
}

// FuzzReadEnvelope feeds arbitrary bytes to the decoder: it must never panic, never accept
// an envelope that fails validation, and re-encode whatever it accepts to the same value.
func FuzzReadEnvelope(f *testing.F) {
	var buf bytes.Buffer
	if err := WriteEnvelope(&buf, validEnvelope()); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Add([]byte{0, 0, 0, 2, '{', '}'})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := ReadEnvelope(bytes.NewReader(data))
		if err != nil {
			return
		}
		if err := e.Validate(); err != nil {
			t.Fatalf("accepted an invalid envelope: %v", err)
		}
		var again bytes.Buffer
		if err := WriteEnvelope(&again, e); err != nil {
			t.Fatalf("accepted envelope does not re-encode: %v", err)
		}
		e2, err := ReadEnvelope(&again)
		if err != nil || !reflect.DeepEqual(e, e2) {
			t.Fatalf("re-encoded envelope differs: %v", err)
		}
	})
}

// Restart travels as "restart" and is left out when false, so older envelopes read the same.
func TestEnvelopeRestart(t *testing.T) {
	for _, restart := range []bool{false, true} {
		e := validEnvelope()
		e.Main.Restart = restart
		var buf bytes.Buffer
		if err := WriteEnvelope(&buf, e); err != nil {
			t.Fatal(err)
		}
		if got := bytes.Contains(buf.Bytes(), []byte(`"restart":true`)); got != restart {
			t.Fatalf("restart=%v encodes as %s", restart, buf.Bytes()[4:])
		}
		back, err := ReadEnvelope(&buf)
		if err != nil || !reflect.DeepEqual(back, e) {
			t.Fatalf("round trip: %+v, %v", back, err)
		}
	}
}

// sandboxIDRule is ValidSandboxID's rule as a regexp: the tests hold the loop to it.
var sandboxIDRule = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

func TestValidSandboxID(t *testing.T) {
	for id, want := range map[string]bool{
		"sb-abcdefghij": true, "a": true, "0": true, "a-": true, strings.Repeat("a", 63): true,
		"": false, "-a": false, "A": false, "sb_x": false, "sb.x": false, "sb x": false,
		strings.Repeat("a", 64): false, "é": false, "a/b": false, "a\x00": false,
	} {
		if got := ValidSandboxID(id); got != want || got != sandboxIDRule.MatchString(id) {
			t.Errorf("ValidSandboxID(%q) = %v, want %v", id, got, want)
		}
	}
}

// FuzzValidSandboxID: the loop accepts exactly what the rule's regexp does.
func FuzzValidSandboxID(f *testing.F) {
	for _, s := range []string{"sb-abcdefghij", "-a", strings.Repeat("z", 64), "A9"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		if got, want := ValidSandboxID(id), sandboxIDRule.MatchString(id); got != want {
			t.Fatalf("ValidSandboxID(%q) = %v, the rule says %v", id, got, want)
		}
	})
}
