package session

import (
	"os"
	"testing"
	"time"
)

// A pump that reaches its pipe after the drain deadline has passed still gets what the
// command wrote: Go fails such a read without trying it, and the output was lost (seen
// once in CI under load: `echo fresh` answered with empty stdout).
func TestReadBufferedAfterDeadline(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := w.Write([]byte("fresh\n")); err != nil {
		t.Fatal(err)
	}
	// The writer stays open, as when a background child holds the pipe.
	defer w.Close()
	if err := r.SetReadDeadline(time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Read(make([]byte, 10)); !os.IsTimeout(err) {
		t.Fatalf("read past the deadline: %v; this test assumes Go fails it without reading", err)
	}
	var got []byte
	done := make(chan struct{})
	go func() {
		readBuffered(r, func(b []byte) { got = append(got, b...) })
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("readBuffered waited for more output instead of returning")
	}
	if string(got) != "fresh\n" {
		t.Errorf("readBuffered = %q, want the buffered output", got)
	}
}
