package server

import (
	"net/http"
	"strings"
	"testing"
)

func FuzzIfMatch(f *testing.F) {
	for _, s := range []string{"", `"0123456789abcdef0123456789abcdef"`, "*", `W/"x"`, `"a", "b"`, `"`, `""`, "abc", `"a b"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		r, _ := http.NewRequest("PUT", "/", nil)
		r.Header["If-Match"] = []string{v}
		tag, err := ifMatchOf(r)
		if err != nil {
			if !strings.Contains(err.Error(), "If-Match") {
				t.Fatalf("error %q does not name If-Match", err)
			}
			return
		}
		if strings.TrimSpace(v) == "" {
			if tag != "" {
				t.Fatalf("no If-Match gave tag %q", tag)
			}
			return
		}
		if tag == "" || len(tag) > 128 || quoteETag(tag) != strings.TrimSpace(v) {
			t.Fatalf("If-Match %q gave tag %q", v, tag)
		}
	})
}
