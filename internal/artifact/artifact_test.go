package artifact

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
)

const lock = `{"name":"my-site","lockfileVersion":3,"packages":{
 "":{"name":"my-site"},
 "node_modules/react":{"version":"18.3.1","integrity":"sha512-abc"},
 "node_modules/@vitejs/plugin-react":{"version":"4.3.4","dev":true},
 "node_modules/a/node_modules/react":{"version":"17.0.2"},
 "node_modules/local":{"link":true}}}`

func TestParsePackageLock(t *testing.T) {
	cs, err := ParsePackageLock([]byte(lock))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range cs {
		got = append(got, c.Name+"@"+c.Version)
	}
	if want := "@vitejs/plugin-react@4.3.4 react@17.0.2 react@18.3.1"; strings.Join(got, " ") != want {
		t.Errorf("components %q, want %q", got, want)
	}
	for _, bad := range []string{`{`, `{"lockfileVersion":9}`, `[]`} {
		if _, err := ParsePackageLock([]byte(bad)); err == nil {
			t.Errorf("ParsePackageLock(%q) accepted it", bad)
		}
	}
}

func TestParseGoSum(t *testing.T) {
	sum := "github.com/google/uuid v1.6.0 h1:NIvaJDMOsjHA8n1jAhLSgzrAzy1Hgr+hNrb57e+94F0=\n" +
		"github.com/google/uuid v1.6.0/go.mod h1:TIyPZe4MgqvfeYDBFedMoGGpEw/LqOeaOT+nhxU+yHo=\n"
	cs, err := ParseGoSum([]byte(sum))
	if err != nil || len(cs) != 1 || cs[0].Name != "github.com/google/uuid" || cs[0].Version != "v1.6.0" {
		t.Fatalf("ParseGoSum: %+v, %v", cs, err)
	}
	if _, err := ParseGoSum([]byte("github.com/x v1\n")); err == nil || !strings.Contains(err.Error(), "go.sum line 1") {
		t.Errorf("a bad go.sum line: %v", err)
	}
}

func TestFilesAndSBOM(t *testing.T) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	body := []byte("<h1>hi</h1>")
	tw.WriteHeader(&tar.Header{Name: "./", Typeflag: tar.TypeDir, Mode: 0o755})
	tw.WriteHeader(&tar.Header{Name: "./index.html", Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(body))})
	tw.Write(body)
	tw.Close()
	zw.Close()
	files, err := Files(buf.Bytes())
	sum := sha256.Sum256(body)
	if err != nil || len(files) != 1 || files[0].Path != "index.html" || files[0].SHA256 != hex.EncodeToString(sum[:]) {
		t.Fatalf("Files: %+v, %v", files, err)
	}
	if _, err := Files([]byte("not gzip")); err == nil {
		t.Error("Files accepted bytes that are not gzip")
	}
	cs, _ := ParsePackageLock([]byte(lock))
	sb, err := SBOM(Manifest{Runtime: "node", SHA256: "00"}, "my-site", cs)
	if err != nil {
		t.Fatal(err)
	}
	var bom struct {
		BOMFormat  string
		Components []struct{ Name, Version, Purl string }
	}
	if err := json.Unmarshal(sb, &bom); err != nil || bom.BOMFormat != "CycloneDX" || len(bom.Components) != 3 || bom.Components[0].Purl != "pkg:npm/%40vitejs/plugin-react@4.3.4" {
		t.Errorf("SBOM: %+v, %v\n%s", bom, err, sb)
	}
}

func FuzzParsePackageLock(f *testing.F) {
	f.Add([]byte(lock))
	f.Add([]byte(`{"lockfileVersion":1,"dependencies":{"a":{"version":"1.0.0"}}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		cs, err := ParsePackageLock(b)
		if err == nil {
			if _, err := SBOM(Manifest{Runtime: "node"}, "x", cs); err != nil {
				t.Fatal(err)
			}
		}
	})
}

func FuzzParseGoSum(f *testing.F) {
	f.Add([]byte("golang.org/x/text v0.3.0 h1:g61tztE5qeGQ89tm6NTjjM9VPIm088od1l6aSorWRWg=\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		cs, err := ParseGoSum(b)
		if err == nil {
			if _, err := SBOM(Manifest{Runtime: "go"}, "x", cs); err != nil {
				t.Fatal(err)
			}
		}
	})
}

func FuzzFiles(f *testing.F) {
	f.Add([]byte{0x1f, 0x8b})
	f.Fuzz(func(t *testing.T, b []byte) { _, _ = Files(b) })
}
