package paddock_test

import (
	"strings"
	"testing"

	"github.com/paddockhq/paddock"
	"github.com/paddockhq/paddock/internal/api"
)

func TestReadProviderEvents(t *testing.T) {
	in := ": comment\n" +
		"event: progress\ndata: {\"type\":\"progress\",\"step\":\"build\",\"state\":\"running\"}\n\n" +
		"event: log\ndata: {\"type\":\"log\",\n\ndata: \"line\":\"x\"}\n\n" +
		"event: result\nid: 3\ndata: {\"type\":\"result\",\"unknown\":1}\n\n"
	var got []api.ProviderEvent
	err := paddock.ReadProviderEvents(strings.NewReader(in), func(ev api.ProviderEvent) { got = append(got, ev) })
	if err == nil {
		t.Fatalf("a data field that is not JSON: events %+v, no error", got)
	}
	in = strings.Replace(in, "{\"type\":\"log\",\n\ndata: ", "{\"type\":\"log\",\ndata: ", 1)
	got = nil
	if err := paddock.ReadProviderEvents(strings.NewReader(in), func(ev api.ProviderEvent) { got = append(got, ev) }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0].State != "running" || got[1].Line != "x" || got[2].Type != api.EventResult {
		t.Errorf("events %+v, want progress, a log line x split over two data fields, result", got)
	}
}

func FuzzReadProviderEvents(f *testing.F) {
	f.Add([]byte("event: log\ndata: {\"type\":\"log\",\"line\":\"a\"}\n\n"))
	f.Add([]byte("data: {\ndata: }\n\n:c\n\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		_ = paddock.ReadProviderEvents(strings.NewReader(string(b)), func(api.ProviderEvent) {})
	})
}
