package gateway

import (
	"net/url"
	"path"
	"strings"
	"testing"
)

// usageSeeds are real provider streams and answers, and some that are not.
var usageSeeds = []string{
	"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":34}}\n\ndata: [DONE]\n\n",
	"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":25,\"output_tokens\":1}}}\n\nevent: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":15}}\n\n",
	"data: {\"usage\":\r\ndata: {\"input_tokens\":5}}\r\n\r\n: comment\r\r",
	`{"id":"x","choices":[{"message":{"content":"\"usage\":{}"}}],"usage":{"prompt_tokens":10,"completion_tokens":20}}`,
	`{"usage":{"input_tokens":1e3,"output_tokens":-1,"cache_read_input_tokens":9223372036854775807}}`,
	`[[[[{"usage":{}}]]]]}}}}]]]"usage":{"input_tokens":3}`,
	"data: \"\\\"usage\\\":{\n\n",
}

// FuzzUsageSSE: whatever a provider streams, the parser neither panics nor holds more
// than a usage's worth of bytes, counts nothing negative, and counts the same however
// the stream is cut into reads.
func FuzzUsageSSE(f *testing.F) {
	for _, s := range usageSeeds {
		f.Add([]byte(s), uint16(3))
	}
	f.Fuzz(func(t *testing.T, b []byte, cut uint16) {
		var whole, split sseParser
		whole.Write(b)
		n := int(cut)%(len(b)+1) + 1
		for i := 0; i < len(b); i += n {
			split.Write(b[i:min(i+n, len(b))])
			if len(split.scan.buf) > maxUsageBytes {
				t.Fatalf("parser holds %d bytes", len(split.scan.buf))
			}
		}
		checkSame(t, whole.tokens(), split.tokens())
	})
}

// FuzzUsageJSON: the same for answers that are not streamed.
func FuzzUsageJSON(f *testing.F) {
	for _, s := range usageSeeds {
		f.Add([]byte(s), uint16(5))
	}
	f.Fuzz(func(t *testing.T, b []byte, cut uint16) {
		var whole, split usageScanner
		whole.Write(b)
		n := int(cut)%(len(b)+1) + 1
		for i := 0; i < len(b); i += n {
			split.Write(b[i:min(i+n, len(b))])
			if len(split.buf) > maxUsageBytes {
				t.Fatalf("scanner holds %d bytes", len(split.buf))
			}
		}
		checkSame(t, whole.tokens(), split.tokens())
	})
}

func checkSame(t *testing.T, a, b tokens) {
	t.Helper()
	if a != b {
		t.Fatalf("counted %+v whole and %+v in pieces", a, b)
	}
	if a.in < 0 || a.out < 0 {
		t.Fatalf("negative count %+v", a)
	}
}

// FuzzUpstreamPath: whatever path the sandbox asks for, what goes upstream stays under
// the provider's base path once the upstream resolves dot segments and escapes.
func FuzzUpstreamPath(f *testing.F) {
	for _, s := range []string{"/v1/chat/completions", "/v1/../../x", "/%2e%2e/x", "/a%2f..%2fb", "/a%5c..%5cb", "", "/./", "/%zz", "//x"} {
		f.Add(s)
	}
	base, _ := parseBaseURL("https://llm.example/tenant/a")
	f.Fuzz(func(t *testing.T, rest string) {
		if rest != "" && !strings.HasPrefix(rest, "/") {
			rest = "/" + rest
		}
		p, raw, err := upstreamPath(base, rest)
		if err != nil {
			return
		}
		if !strings.HasPrefix(raw, "/tenant/a") || !strings.HasPrefix(p, "/tenant/a") {
			t.Fatalf("%q → %q (%q) leaves the base path", rest, p, raw)
		}
		if c := path.Clean(p); c != "/tenant/a" && !strings.HasPrefix(c, "/tenant/a/") {
			t.Fatalf("%q → %q resolves to %q", rest, p, c)
		}
		u := url.URL{Scheme: "https", Host: "llm.example", Path: p, RawPath: raw}
		if _, err := url.Parse(u.String()); err != nil {
			t.Fatalf("%q → unparsable URL %q", rest, u.String())
		}
	})
}

// FuzzInspect: any request body either goes upstream unchanged or, for an OpenAI stream,
// as a JSON object that asks for usage.
func FuzzInspect(f *testing.F) {
	for _, s := range []string{`{"model":"m","stream":true}`, `{"stream":true,"stream_options":{"include_usage":false}}`,
		`{"stream":true,"stream_options":"x"}`, `[1]`, `{"stream":"true"}`, `{"STREAM":true}`, `{"model":"<&>","stream":true}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		info, out := inspect(KindOpenAI, "/v1/chat/completions", b)
		if string(out) == string(b) {
			return
		}
		if !info.stream {
			t.Fatalf("changed a body that is not a stream: %q → %q", b, out)
		}
		if !strings.Contains(string(out), `"include_usage":true`) {
			t.Fatalf("changed %q without asking for usage: %q", b, out)
		}
		if info2, out2 := inspect(KindOpenAI, "/v1/chat/completions", out); !info2.stream || string(out2) != string(out) {
			t.Fatalf("not stable: %q → %q → %q", b, out, out2)
		}
	})
}
