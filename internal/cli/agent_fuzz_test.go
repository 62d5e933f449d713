package cli

import (
	"io"
	"strings"
	"testing"
)

// FuzzRenderEvents feeds the CLI's renderer whatever a sandbox prints: it shows it or
// passes it through, and never panics.
func FuzzRenderEvents(f *testing.F) {
	f.Add(`{"type":"turn","turn":1,"text":"hi"}` + "\n" + `{"type":"text","text":"a"}` + "\n" + `{"type":"tool_result","ok":false,"output":"x\ny"}`)
	f.Add("not json\n{\"type\":\"error\",\"kind\":\"stream_cut\"}\n")
	f.Fuzz(func(t *testing.T, s string) {
		_ = renderEvents(strings.NewReader(s), io.Discard)
	})
}
