package coder

import (
	"errors"
	"strings"
	"testing"
)

// A stream is whole when it reaches [DONE], or ends after a finish_reason; one that ends
// cleanly before either is cut, as is one that breaks.
func TestReadStreamEnds(t *testing.T) {
	const text = `data: {"choices":[{"delta":{"content":"hi"}}]}` + "\n\n"
	const finish = `data: {"choices":[{"delta":{},"finish_reason":"stop"}]}` + "\n\n"
	for _, tc := range []struct {
		name, stream, kind string
	}{
		{"done", text + finish + "data: [DONE]\n\n", ""},
		{"finish without done", text + finish, ""},
		{"clean end before finish", text, KindStreamCut},
		{"not JSON", text + "data: {oops\n\n", KindBadStream},
		{"error event", text + `data: {"error":{"message":"overloaded"}}` + "\n\n", KindProviderSaid},
		{"index out of range", `data: {"choices":[{"delta":{"tool_calls":[{"index":64}]}}]}` + "\n\n", KindBadStream},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := readStream(strings.NewReader(tc.stream), func(string) {})
			pe, _ := errors.AsType[*ProviderError](err)
			switch {
			case tc.kind == "" && (err != nil || m.Content != "hi"):
				t.Errorf("got %+v, %v", m, err)
			case tc.kind != "" && (pe == nil || pe.Kind != tc.kind):
				t.Errorf("got %v, want kind %s", err, tc.kind)
			}
		})
	}
}
