// Package desktop serves the sandbox desktop's page and assets from inside the sandbox,
// on wire.DesktopPort of its loopback; the host routes desktop-<sandbox ID> there. The
// files are built from web/desktop (make desktop) and embedded gzipped: the handler sends
// them as they are to a client that takes gzip (browsers), and inflates them otherwise.
//
// It serves static files only, on GET and HEAD: everything the page does goes through the
// control plane's API on the desktop's origin, under its checks. The app, which shares the
// loopback, can read these files and nothing more.
package desktop

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"
)

//go:embed dist
var dist embed.FS

// Handler serves the embedded desktop: "/" and any path without an extension is the page
// (the desktop is one page), anything else the asset of that name.
func Handler() http.Handler { return &handler{} }

type handler struct {
	once sync.Once
	tags map[string]string // file name → ETag
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "the desktop's files are read with GET", http.StatusMethodNotAllowed)
		return
	}
	name := path.Clean("/" + r.URL.Path)[1:]
	if name == "" || path.Ext(name) == "" {
		name = "index.html"
	}
	body, err := fs.ReadFile(dist, "dist/"+name+".gz")
	if err != nil {
		http.Error(w, "no desktop file "+strconv.Quote(name), http.StatusNotFound)
		return
	}
	h.once.Do(h.hashAll)
	hd := w.Header()
	hd.Set("Content-Type", contentType(name))
	hd.Set("Vary", "Accept-Encoding")
	hd.Set("ETag", h.tags[name])
	// The names carry no hash, so every load revalidates: a 304 is cheap.
	hd.Set("Cache-Control", "no-cache")
	if r.Header.Get("If-None-Match") == h.tags[name] {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	if acceptsGzip(r.Header.Get("Accept-Encoding")) {
		hd.Set("Content-Encoding", "gzip")
		hd.Set("Content-Length", strconv.Itoa(len(body)))
		w.WriteHeader(http.StatusOK)
		if r.Method == http.MethodGet {
			_, _ = w.Write(body)
		}
		return
	}
	zr, err := gzip.NewReader(bytes.NewReader(body))
	if err != nil {
		http.Error(w, "desktop file "+name+" is corrupt", http.StatusInternalServerError)
		return
	}
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodGet {
		_, _ = io.Copy(w, zr)
	}
}

func (h *handler) hashAll() {
	h.tags = map[string]string{}
	_ = fs.WalkDir(dist, "dist", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		b, _ := fs.ReadFile(dist, p)
		sum := sha256.Sum256(b)
		h.tags[strings.TrimSuffix(strings.TrimPrefix(p, "dist/"), ".gz")] = `"` + hex.EncodeToString(sum[:8]) + `"`
		return nil
	})
}

func contentType(name string) string {
	if t := mime.TypeByExtension(path.Ext(name)); t != "" {
		return t
	}
	return "application/octet-stream"
}

// acceptsGzip reads an Accept-Encoding loosely: gzip listed without q=0.
func acceptsGzip(v string) bool {
	for part := range strings.SplitSeq(v, ",") {
		enc, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.EqualFold(strings.TrimSpace(enc), "gzip") {
			return strings.ReplaceAll(params, " ", "") != "q=0"
		}
	}
	return false
}

// Listen binds addr (the sandbox's loopback at wire.DesktopPort) now, so that nothing
// started later can take it.
func Listen(addr string) (net.Listener, error) { return net.Listen("tcp", addr) }

// Serve serves the desktop on l until ctx ends.
func Serve(ctx context.Context, l net.Listener, log *slog.Logger) {
	srv := &http.Server{Handler: Handler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 60 * time.Second,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Warn("desktop: stopped serving", "err", err)
	}
}

// Files is the desktop's files as a plain file server would hold them: every embedded
// file inflated, by name. The benchmarks serve them with http.FileServerFS as a floor.
func Files() (map[string][]byte, error) {
	entries, err := fs.ReadDir(dist, "dist")
	if err != nil {
		return nil, err
	}
	files := make(map[string][]byte, len(entries))
	for _, e := range entries {
		gz, err := fs.ReadFile(dist, "dist/"+e.Name())
		if err != nil {
			return nil, err
		}
		zr, err := gzip.NewReader(bytes.NewReader(gz))
		if err != nil {
			return nil, fmt.Errorf("desktop file %s: %w", e.Name(), err)
		}
		b, err := io.ReadAll(zr)
		if err != nil {
			return nil, fmt.Errorf("desktop file %s: %w", e.Name(), err)
		}
		files[strings.TrimSuffix(e.Name(), ".gz")] = b
	}
	return files, nil
}
