package scripted_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/paddockhq/paddock/internal/gateway/scripted"
)

// The Anthropic stream has the events of Anthropic's Messages API in their order, with a
// tool call's input as input_json_delta fragments.
func TestAnthropicStream(t *testing.T) {
	s, err := scripted.Parse([]byte(`{"steps": [
	  {"expect": {"last_role": "user", "last_contains": ["hi"], "tools": ["read_file"]},
	   "respond": {"content": "reading it", "fragment": 4, "tool_calls": [{"id": "toolu_1", "name": "read_file", "arguments": {"path": "a.txt"}}]}},
	  {"expect": {"last_role": "tool", "last_contains": ["the file's text"]}, "respond": {"content": "done"}}
	]}`))
	if err != nil {
		t.Fatal(err)
	}
	p := scripted.New(s)
	srv := httptest.NewServer(p)
	defer srv.Close()
	post := func(body string) *http.Response {
		resp, err := http.Post(srv.URL+"/v1/messages", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	resp := post(`{"model":"claude","max_tokens":100,"stream":true,"tools":[{"name":"read_file","input_schema":{"type":"object"}}],
	  "messages":[{"role":"user","content":"hi"}]}`)
	defer resp.Body.Close()
	var names []string
	var text, input, stop string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if name, ok := strings.CutPrefix(line, "event: "); ok {
			names = append(names, name)
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		var ev struct {
			Type  string `json:"type"`
			Delta struct {
				Type, Text, PartialJSON, StopReason string
			} `json:"delta"`
		}
		var raw map[string]any
		json.Unmarshal([]byte(data), &ev)
		json.Unmarshal([]byte(data), &raw)
		if ev.Type != names[len(names)-1] {
			t.Errorf("event %s carries type %s", names[len(names)-1], ev.Type)
		}
		if d, ok := raw["delta"].(map[string]any); ok {
			if s, ok := d["text"].(string); ok {
				text += s
			}
			if s, ok := d["partial_json"].(string); ok {
				input += s
			}
			if s, ok := d["stop_reason"].(string); ok {
				stop = s
			}
		}
	}
	got := strings.Join(names, " ")
	want := "message_start content_block_start content_block_delta content_block_delta content_block_delta content_block_stop " +
		"content_block_start content_block_delta content_block_delta content_block_delta content_block_delta content_block_delta content_block_stop message_delta message_stop"
	if got != want || text != "reading it" || input != `{"path": "a.txt"}` || stop != "tool_use" {
		t.Errorf("events %s\ntext %q, input %q, stop %q", got, text, input, stop)
	}

	// A conversation whose tool_use goes unanswered is refused, as Anthropic refuses it.
	bad := post(`{"model":"claude","max_tokens":100,"messages":[{"role":"user","content":"hi"},
	  {"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"read_file","input":{}}]},
	  {"role":"user","content":"go on"}]}`)
	b, _ := io.ReadAll(bad.Body)
	bad.Body.Close()
	if bad.StatusCode != 400 || !strings.Contains(string(b), `tool_use \"toolu_1\" has no tool_result`) {
		t.Errorf("an unanswered tool_use: %d %s", bad.StatusCode, b)
	}
	ok := post(`{"model":"claude","max_tokens":100,"messages":[{"role":"user","content":"hi"},
	  {"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"read_file","input":{}}]},
	  {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"the file's text"}]}]}`)
	b, _ = io.ReadAll(ok.Body)
	ok.Body.Close()
	if ok.StatusCode != 200 || !strings.Contains(string(b), `"stop_reason":"end_turn"`) || !strings.Contains(string(b), `"text":"done"`) {
		t.Errorf("a whole answer: %d %s", ok.StatusCode, b)
	}
	if err := p.Err(); err != nil {
		t.Error(err)
	}
}
