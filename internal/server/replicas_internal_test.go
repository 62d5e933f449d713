package server

import (
	"net/http/httptest"
	"strings"
	"testing"
)

// FuzzCheckHop: a hop header from anywhere never panics, and authenticates only when it
// is the signature of the request it came with, under the cluster's key.
func FuzzCheckHop(f *testing.F) {
	s := &Server{cluster: &cluster{id: "r1", key: []byte(strings.Repeat("k", 32))}}
	signed := httptest.NewRequest("GET", "http://live-u.localhost/api/info?x=1", nil)
	s.cluster.sign(signed, "u1")
	f.Add(signed.Header.Get(HopHeader), "/api/info?x=1")
	f.Add("v1 r1 0 u1 AAAA", "/")
	f.Add("v1 r1 99999999999999999999 - x", "/")
	f.Add("", "")
	f.Fuzz(func(t *testing.T, v, uri string) {
		if !strings.HasPrefix(uri, "/") {
			uri = "/" + uri
		}
		defer func() {
			if recover() != nil {
				t.Skip() // httptest's own parse of a malformed URI
			}
		}()
		r := httptest.NewRequest("GET", "http://live-u.localhost"+uri, nil)
		h, err := s.checkHop(r, []string{v})
		if err == nil && (v != signed.Header.Get(HopHeader) || r.URL.RequestURI() != signed.URL.RequestURI()) {
			t.Fatalf("hop %q on %s authenticated as %+v", v, uri, h)
		}
	})
}

// A hop signed by this cluster authenticates its own request and no other.
func TestHopSignature(t *testing.T) {
	s := &Server{cluster: &cluster{id: "r1", key: []byte(strings.Repeat("k", 32))}}
	r := httptest.NewRequest("GET", "http://live-u.localhost/api/info", nil)
	s.cluster.sign(r, "u1")
	if h, err := s.checkHop(r, r.Header.Values(HopHeader)); err != nil || h.user != "u1" || h.from != "r1" {
		t.Fatalf("own hop: %+v, %v", h, err)
	}
	other := httptest.NewRequest("POST", "http://live-u.localhost/api/info", nil)
	if _, err := s.checkHop(other, r.Header.Values(HopHeader)); err == nil {
		t.Error("a hop signed for a GET authenticated a POST")
	}
	elsewhere := &Server{cluster: &cluster{id: "r2", key: []byte(strings.Repeat("x", 32))}}
	if _, err := elsewhere.checkHop(r, r.Header.Values(HopHeader)); err == nil {
		t.Error("a hop signed under another key authenticated")
	}
	alone := &Server{}
	if _, err := alone.checkHop(r, r.Header.Values(HopHeader)); err == nil {
		t.Error("a server that is no replica accepted a hop")
	}
}
