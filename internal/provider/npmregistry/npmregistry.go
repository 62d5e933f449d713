// Package npmregistry is a read-only npm registry: it serves a directory of packuments and
// tarballs, filled once from an upstream registry for the packages a lockfile names. Tests
// run it on loopback so that a sandbox's npm install reaches a real registry through the
// egress allowlist without the internet.
package npmregistry

import (
	"bytes"
	"context"
	"crypto/sha512"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// Upstream is the public registry the directory is filled from.
const Upstream = "https://registry.npmjs.org/"

// validName is an npm package name, scoped or not.
var validName = regexp.MustCompile(`^(@[a-z0-9][a-z0-9._~-]*/)?[a-z0-9][a-z0-9._~-]*$`)

type lockEntry struct {
	Version   string   `json:"version"`
	Resolved  string   `json:"resolved"`
	Integrity string   `json:"integrity"`
	OS        []string `json:"os"`
	CPU       []string `json:"cpu"`
	Libc      []string `json:"libc"`
}

// Fill downloads into dir what is missing of the packages lock (a package-lock.json, v3)
// names for linux/x64 with glibc: each version's manifest and tarball, the tarball checked
// against the lockfile's integrity.
func Fill(ctx context.Context, dir string, lock []byte) error {
	var lf struct {
		Packages map[string]lockEntry `json:"packages"`
	}
	if err := json.Unmarshal(lock, &lf); err != nil {
		return fmt.Errorf("lockfile: %w", err)
	}
	versions := map[string]map[string]json.RawMessage{}
	for key, e := range lf.Packages {
		i := strings.LastIndex(key, "node_modules/")
		if i < 0 || e.Resolved == "" || !fits(e) {
			continue
		}
		name := key[i+len("node_modules/"):]
		if !validName.MatchString(name) {
			return fmt.Errorf("lockfile: package name %q", name)
		}
		if err := fetchTarball(ctx, dir, name, e); err != nil {
			return err
		}
		m, err := manifest(ctx, dir, name, e.Version)
		if err != nil {
			return err
		}
		if versions[name] == nil {
			versions[name] = map[string]json.RawMessage{}
		}
		versions[name][e.Version] = m
	}
	for name, vs := range versions {
		latest := ""
		for v := range vs {
			latest = max(latest, v) // any version will do: installs go by the lockfile
		}
		b, err := json.Marshal(map[string]any{"name": name, "dist-tags": map[string]string{"latest": latest}, "versions": vs})
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.FromSlash(name), "packument.json"), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func fits(e lockEntry) bool {
	ok := func(list []string, want string) bool {
		if len(list) == 0 {
			return true
		}
		for _, v := range list {
			if v == want {
				return true
			}
		}
		return false
	}
	return ok(e.OS, "linux") && ok(e.CPU, "x64") && ok(e.Libc, "glibc")
}

func fetchTarball(ctx context.Context, dir, name string, e lockEntry) error {
	u, err := url.Parse(e.Resolved)
	if err != nil || !strings.HasPrefix(e.Resolved, Upstream) {
		return fmt.Errorf("%s: resolved %q is not on %s", name, e.Resolved, Upstream)
	}
	file := filepath.Join(dir, filepath.FromSlash(name), "-", filepath.Base(u.Path))
	if b, err := os.ReadFile(file); err == nil && checkIntegrity(b, e.Integrity) == nil {
		return nil
	}
	b, err := get(ctx, e.Resolved)
	if err != nil {
		return err
	}
	if err := checkIntegrity(b, e.Integrity); err != nil {
		return fmt.Errorf("%s@%s: %w", name, e.Version, err)
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	return os.WriteFile(file, b, 0o644)
}

func manifest(ctx context.Context, dir, name, version string) (json.RawMessage, error) {
	file := filepath.Join(dir, filepath.FromSlash(name), version+".json")
	if b, err := os.ReadFile(file); err == nil {
		return b, nil
	}
	b, err := get(ctx, Upstream+strings.Replace(name, "/", "%2f", 1)+"/"+version)
	if err != nil {
		return nil, err
	}
	if !json.Valid(b) {
		return nil, fmt.Errorf("%s@%s: the manifest is not JSON", name, version)
	}
	return b, os.WriteFile(file, b, 0o644)
}

func checkIntegrity(b []byte, integrity string) error {
	want, ok := strings.CutPrefix(integrity, "sha512-")
	if !ok {
		return fmt.Errorf("integrity %q: want sha512", integrity)
	}
	sum := sha512.Sum512(b)
	if base64.StdEncoding.EncodeToString(sum[:]) != want {
		return fmt.Errorf("the tarball does not match its integrity %s", integrity)
	}
	return nil
}

func get(ctx context.Context, u string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	return io.ReadAll(io.LimitReader(resp.Body, 256<<20))
}

// Handler serves dir as a registry: GET /NAME is the packument, with tarball addresses on
// this server as the request reached it; GET /NAME/-/FILE.tgz is a tarball.
func Handler(dir string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := url.PathUnescape(strings.TrimPrefix(r.URL.EscapedPath(), "/"))
		if err != nil || r.Method != http.MethodGet && r.Method != http.MethodHead {
			http.Error(w, `{"error":"bad request"}`, http.StatusBadRequest)
			return
		}
		name, file, tarball := strings.Cut(p, "/-/")
		if !validName.MatchString(name) || tarball && (strings.ContainsAny(file, "/\\") || !strings.HasSuffix(file, ".tgz")) {
			http.Error(w, `{"error":"not found"}`, http.StatusNotFound)
			return
		}
		if tarball {
			http.ServeFile(w, r, filepath.Join(dir, filepath.FromSlash(name), "-", file))
			return
		}
		b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(name), "packument.json"))
		if err != nil {
			http.Error(w, `{"error":"not found"}`, http.StatusNotFound)
			return
		}
		b = bytes.ReplaceAll(b, []byte(Upstream), []byte("http://"+r.Host+"/"))
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(b)
	})
}
