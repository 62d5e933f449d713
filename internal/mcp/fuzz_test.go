package mcp_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/paddockhq/paddock"
	pmcp "github.com/paddockhq/paddock/internal/mcp"
)

// FuzzMessages feeds arbitrary bytes to the MCP server as JSON-RPC messages, after a
// valid handshake, and then a ping: the server must answer the ping or end the session,
// once its input ends, within a deadline, and never panic. The tools' backend is a real client of a server
// that is not there, so a tool call the fuzzer makes valid ends in a precise error; an
// invalid one goes through the rewording of schema errors.
func FuzzMessages(f *testing.F) {
	for _, seed := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"run_command","arguments":{"sandbox":"sb-aaaaaaaaaa","argv":"ls"}}}`,
		`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"edit_file","arguments":{"sandbox":"x","path":"a","old_string":"","new_string":1}}}`,
		`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"nope","arguments":[]}}`,
		`{"jsonrpc":"2.0","id":5,"method":"resources/read","params":{"uri":"paddock://sandboxes//files/"}}`,
		`{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"read_file","arguments":{"sandbox":"s","path":"p","max_bytes":1e309}}}`,
		`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"write_file","arguments":{"sandbox":"sb-aaaaaaaaaa","path":"a","content":"x"}}}`,
		`{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"run_command","arguments":{"sandbox":"sb-aaaaaaaaaa","argv":["a",3],"x":1}}}`,
		`{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}`,
		`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`,
		`{"jsonrpc":"1.0"`,
		"\x00\xff",
		`[]`,
	} {
		f.Add(seed)
	}
	backend := pmcp.Client{C: paddock.New("http://127.0.0.1:1")}
	f.Fuzz(func(t *testing.T, msg string) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		// Half the inputs meet a read-only server, whose withheld tools answer apart.
		s := pmcp.NewServer(backend, pmcp.Options{ReadOnly: len(msg)%2 == 1})
		inR, inW := io.Pipe()
		outR, outW := io.Pipe()
		ss, err := s.Connect(ctx, &sdk.IOTransport{Reader: inR, Writer: outW}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer ss.Close()
		go func() {
			for _, line := range []string{
				`{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"fuzz","version":"1"}}}`,
				`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
				strings.ReplaceAll(msg, "\n", " "),
				`{"jsonrpc":"2.0","id":"last","method":"ping"}`,
			} {
				if _, err := io.WriteString(inW, line+"\n"); err != nil {
					return // the server ended the session
				}
			}
			// The input ends: a message left incomplete (stdio frames are JSON values, not
			// lines) ends the session instead of waiting for more.
			inW.Close()
		}()
		done := make(chan error, 1)
		go func() {
			sc := bufio.NewScanner(outR)
			sc.Buffer(nil, 16<<20)
			for sc.Scan() {
				var m struct {
					ID json.RawMessage `json:"id"`
				}
				if json.Unmarshal(sc.Bytes(), &m) == nil && string(m.ID) == `"last"` {
					done <- nil
					return
				}
			}
			done <- sc.Err() // the session ended: a refusal, not a hang
		}()
		select {
		case <-done:
		case <-ctx.Done():
			t.Fatalf("no answer to a ping after %q", msg)
		}
		outR.Close()
	})
}
