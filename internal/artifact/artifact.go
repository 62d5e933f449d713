// Package artifact makes a packaged build's artifact: its manifest (runtime, toolchain,
// source checkpoint, the SHA-256 of every file in the archive) and a CycloneDX SBOM made
// from the project's lockfile. The archive and the lockfile come from a sandbox, so every
// parser here reads untrusted bytes and is bounded.
package artifact

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"

	"github.com/BurntSushi/toml"
	cdx "github.com/CycloneDX/cyclonedx-go"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/errdefs"
)

// Limits on what an archive may hold, so that a hostile one cannot exhaust the control
// plane.
const (
	MaxArchiveBytes  = 512 << 20
	maxFiles         = 100_000
	maxUnpackedBytes = 2 << 30
	maxLockfileBytes = 32 << 20
)

// File is one regular file of an archive.
type File = api.ArtifactFile

// Manifest says what an artifact is.
type Manifest = api.ArtifactManifest

// Files lists the regular files of a gzipped tar archive with their SHA-256, sorted by
// path. A malformed or oversized archive is an error naming what was wrong.
func Files(archive []byte) ([]File, error) {
	zr, err := gzip.NewReader(bytes.NewReader(archive))
	if err != nil {
		return nil, fmt.Errorf("archive: not gzip: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	tr := tar.NewReader(zr)
	var files []File
	var total int64
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("archive: %v: %w", err, errdefs.ErrInvalidArgument)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		if len(files) == maxFiles {
			return nil, fmt.Errorf("archive: more than %d files: %w", maxFiles, errdefs.ErrInvalidArgument)
		}
		sum := sha256.New()
		n, err := io.Copy(sum, io.LimitReader(tr, maxUnpackedBytes-total+1))
		if err != nil {
			return nil, fmt.Errorf("archive: %s: %v: %w", h.Name, err, errdefs.ErrInvalidArgument)
		}
		if total += n; total > maxUnpackedBytes {
			return nil, fmt.Errorf("archive: unpacks to more than %d bytes: %w", int64(maxUnpackedBytes), errdefs.ErrInvalidArgument)
		}
		name := strings.TrimPrefix(path.Clean("/"+h.Name), "/")
		files = append(files, File{Path: name, Size: n, SHA256: hex.EncodeToString(sum.Sum(nil))})
	}
	sort.Slice(files, func(i, j int) bool { return files[i].Path < files[j].Path })
	return files, nil
}

// Component is one dependency a lockfile pins.
type Component struct {
	Name    string
	Version string
	// Hash is the lockfile's integrity value (npm's "sha512-…", go.sum's "h1:…",
	// Cargo.lock's "sha256:…").
	Hash string
	Dev  bool
}

// ParsePackageLock reads npm's package-lock.json (lockfile versions 1 to 3): the packages
// it installs, sorted by name.
func ParsePackageLock(b []byte) ([]Component, error) {
	if len(b) > maxLockfileBytes {
		return nil, fmt.Errorf("package-lock.json: larger than %d bytes: %w", maxLockfileBytes, errdefs.ErrInvalidArgument)
	}
	type entry struct {
		Version   string `json:"version"`
		Integrity string `json:"integrity"`
		Dev       bool   `json:"dev"`
		Link      bool   `json:"link"`
	}
	var lock struct {
		LockfileVersion int              `json:"lockfileVersion"`
		Packages        map[string]entry `json:"packages"`
		Dependencies    map[string]entry `json:"dependencies"`
	}
	if err := json.Unmarshal(b, &lock); err != nil {
		return nil, fmt.Errorf("package-lock.json is not valid JSON: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	if lock.LockfileVersion < 1 || lock.LockfileVersion > 3 {
		return nil, fmt.Errorf("package-lock.json: lockfileVersion %d: want 1, 2 or 3: %w", lock.LockfileVersion, errdefs.ErrInvalidArgument)
	}
	seen := map[string]bool{}
	var out []Component
	add := func(name string, e entry) {
		if name == "" || e.Link || e.Version == "" || seen[name+"@"+e.Version] {
			return
		}
		seen[name+"@"+e.Version] = true
		out = append(out, Component{Name: name, Version: e.Version, Hash: e.Integrity, Dev: e.Dev})
	}
	if lock.Packages != nil {
		for key, e := range lock.Packages {
			// "node_modules/a/node_modules/@s/b" installs "@s/b"; "" is the project.
			i := strings.LastIndex(key, "node_modules/")
			if i < 0 {
				continue
			}
			add(key[i+len("node_modules/"):], e)
		}
	} else {
		for name, e := range lock.Dependencies {
			add(name, e)
		}
	}
	sortComponents(out)
	return out, nil
}

// ParseGoSum reads a go.sum: the modules whose content it pins (not those it lists for
// their go.mod alone), sorted by path.
func ParseGoSum(b []byte) ([]Component, error) {
	if len(b) > maxLockfileBytes {
		return nil, fmt.Errorf("go.sum: larger than %d bytes: %w", maxLockfileBytes, errdefs.ErrInvalidArgument)
	}
	var out []Component
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if len(f) != 3 || !strings.HasPrefix(f[2], "h1:") || !strings.HasPrefix(f[1], "v") {
			return nil, fmt.Errorf("go.sum line %d: want \"MODULE VERSION h1:HASH\": %w", n, errdefs.ErrInvalidArgument)
		}
		if strings.HasSuffix(f[1], "/go.mod") {
			continue
		}
		out = append(out, Component{Name: f[0], Version: f[1], Hash: f[2]})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("go.sum: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	sortComponents(out)
	return out, nil
}

// ParseCargoLock reads a Cargo.lock: the crates it pins from a registry (not the project's
// own packages, which have no source), sorted by name.
func ParseCargoLock(b []byte) ([]Component, error) {
	if len(b) > maxLockfileBytes {
		return nil, fmt.Errorf("lockfile Cargo.lock: larger than %d bytes: %w", maxLockfileBytes, errdefs.ErrInvalidArgument)
	}
	var lock struct {
		Package []struct {
			Name     string `toml:"name"`
			Version  string `toml:"version"`
			Source   string `toml:"source"`
			Checksum string `toml:"checksum"`
		} `toml:"package"`
	}
	if _, err := toml.Decode(string(b), &lock); err != nil {
		return nil, fmt.Errorf("lockfile Cargo.lock is not valid TOML: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	var out []Component
	for i, p := range lock.Package {
		if p.Name == "" || p.Version == "" {
			return nil, fmt.Errorf("lockfile Cargo.lock package %d: want a name and a version: %w", i+1, errdefs.ErrInvalidArgument)
		}
		if p.Source == "" {
			continue
		}
		c := Component{Name: p.Name, Version: p.Version}
		if p.Checksum != "" {
			c.Hash = "sha256:" + p.Checksum
		}
		out = append(out, c)
	}
	sortComponents(out)
	return out, nil
}

func sortComponents(cs []Component) {
	sort.Slice(cs, func(i, j int) bool {
		if cs[i].Name != cs[j].Name {
			return cs[i].Name < cs[j].Name
		}
		return cs[i].Version < cs[j].Version
	})
}

// purl is a component's package URL.
func purl(runtime string, c Component) string {
	switch runtime {
	case "node":
		name := c.Name
		if strings.HasPrefix(name, "@") {
			name = "%40" + strings.TrimPrefix(name, "@")
		}
		return "pkg:npm/" + name + "@" + c.Version
	case "go":
		return "pkg:golang/" + c.Name + "@" + c.Version
	case "rust":
		return "pkg:cargo/" + c.Name + "@" + c.Version
	}
	return ""
}

// SBOM is a CycloneDX (JSON) bill of materials for the artifact: its components are the
// lockfile's.
func SBOM(m Manifest, name string, comps []Component) ([]byte, error) {
	bom := cdx.NewBOM()
	bom.Metadata = &cdx.Metadata{
		Tools: &cdx.ToolsChoice{Components: &[]cdx.Component{{Type: cdx.ComponentTypeApplication, Name: "paddock"}}},
		Component: &cdx.Component{
			Type: cdx.ComponentTypeApplication, Name: name, BOMRef: "root",
			Hashes: &[]cdx.Hash{{Algorithm: cdx.HashAlgoSHA256, Value: m.SHA256}},
		},
	}
	list := make([]cdx.Component, 0, len(comps))
	for _, c := range comps {
		cc := cdx.Component{Type: cdx.ComponentTypeLibrary, Name: c.Name, Version: c.Version, PackageURL: purl(m.Runtime, c)}
		cc.BOMRef = cc.PackageURL
		if c.Hash != "" {
			cc.Properties = &[]cdx.Property{{Name: "paddock:lockfile-integrity", Value: c.Hash}}
		}
		if c.Dev {
			cc.Scope = cdx.ScopeExcluded
		}
		list = append(list, cc)
	}
	bom.Components = &list
	var buf bytes.Buffer
	enc := cdx.NewBOMEncoder(&buf, cdx.BOMFileFormatJSON)
	enc.SetPretty(true)
	if err := enc.Encode(bom); err != nil {
		return nil, fmt.Errorf("encode sbom: %w", err)
	}
	return buf.Bytes(), nil
}

// Lockfile is the lockfile a runtime's SBOM is made from, relative to the project, and its
// parser; "" for a runtime without one.
func Lockfile(runtime string) (string, func([]byte) ([]Component, error)) {
	switch runtime {
	case "node":
		return "package-lock.json", ParsePackageLock
	case "go":
		return "go.sum", ParseGoSum
	case "rust":
		return "Cargo.lock", ParseCargoLock
	}
	return "", nil
}
