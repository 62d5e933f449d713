package cli

import (
	"strings"
	"testing"
)

// renderEvents shows every kind of step a person must see, each on a line of its own.
func TestRenderEvents(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"text then a tool", `{"type":"text","text":"Looking."}` + "\n" + `{"type":"tool_call","tool":"read_file","args":"{}"}`,
			"Looking.\n> read_file {}\n"},
		{"a stop", `{"type":"error","kind":"rate_limited","message":"slow down"}`, "stopped (rate_limited): slow down\n"},
		{"a killed turn rolled back", `{"type":"text","text":"so"}` + "\n" + `{"type":"recovered","turn":2,"message":"the previous turn was stopped before it ended; its changes were rolled back"}`,
			"so\nnote: the previous turn was stopped before it ended; its changes were rolled back\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out strings.Builder
			if err := renderEvents(strings.NewReader(tc.in), &out); err != nil {
				t.Fatal(err)
			}
			if out.String() != tc.want {
				t.Errorf("got %q, want %q", out.String(), tc.want)
			}
		})
	}
}
