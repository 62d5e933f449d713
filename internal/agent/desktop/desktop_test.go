package desktop

import (
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func get(t testing.TB, path string, hdr map[string]string) *http.Response {
	r := httptest.NewRequest("GET", "http://desktop/", nil)
	r.URL.Path = path
	for k, v := range hdr {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	Handler().ServeHTTP(w, r)
	return w.Result()
}

// The page and its assets are served gzipped to a browser, inflated to a client without
// gzip, revalidated by ETag; anything else is 404, and only GET and HEAD are served.
func TestHandler(t *testing.T) {
	res := get(t, "/", map[string]string{"Accept-Encoding": "gzip, br"})
	if res.StatusCode != 200 || res.Header.Get("Content-Encoding") != "gzip" || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET / with gzip: %d %v", res.StatusCode, res.Header)
	}
	zr, err := gzip.NewReader(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(zr)
	if !strings.Contains(string(page), "/desktop.js") {
		t.Fatalf("the page does not load desktop.js: %q", page)
	}
	plain := get(t, "/desktop.js", nil)
	body, _ := io.ReadAll(plain.Body)
	if plain.StatusCode != 200 || plain.Header.Get("Content-Encoding") != "" || len(body) < 1000 || !strings.Contains(plain.Header.Get("Content-Type"), "javascript") {
		t.Fatalf("GET /desktop.js without gzip: %d %v, %d bytes", plain.StatusCode, plain.Header, len(body))
	}
	if again := get(t, "/desktop.js", map[string]string{"If-None-Match": plain.Header.Get("ETag")}); again.StatusCode != http.StatusNotModified {
		t.Errorf("revalidation: %d, want 304", again.StatusCode)
	}
	for _, p := range []string{"/nope.js", "/../desktop.go", "/dist/index.html.gz"} {
		if res := get(t, p, nil); res.StatusCode != 404 {
			t.Errorf("GET %s: %d, want 404", p, res.StatusCode)
		}
	}
	if res := get(t, "/files/src", nil); res.StatusCode != 200 {
		t.Errorf("a path without an extension (the page's own routes): %d, want the page", res.StatusCode)
	}
	w := httptest.NewRecorder()
	Handler().ServeHTTP(w, httptest.NewRequest("POST", "/", nil))
	if w.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST /: %d, want 405", w.Code)
	}
}

func FuzzHandlerPath(f *testing.F) {
	for _, s := range []string{"/", "/desktop.js", "/../../etc/passwd", "//x", "/a/b.css", "/%00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		res := get(t, "/"+p, map[string]string{"Accept-Encoding": "gzip"})
		switch res.StatusCode {
		case 200, 404:
		default:
			t.Fatalf("GET %q: %d", p, res.StatusCode)
		}
	})
}
