package kube

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

// PauseImage is the image each pod's sandbox runs: the sandbox image the cluster's
// containerd is configured to pin, made here from the static pause binary that setup
// builds (there is no registry to pull it from).
const PauseImage = "registry.k8s.io/pause:3.10.1"

// Image is a container image made from files on this machine, for a cluster with no
// registry: pods use it by Ref with imagePullPolicy Never (or IfNotPresent).
type Image struct {
	Ref string // e.g. "paddock.local/agent:test"; a name without a registry gets docker.io/library/
	// Rootfs is a directory whose whole tree becomes the image's one layer (symlinks kept,
	// owners and modes as on disk); empty for an image of Files alone.
	Rootfs string
	// Files adds host files to the layer, by their path in the image (e.g.
	// "/usr/local/bin/paddock-agent" → the binary built from this checkout); they win over
	// Rootfs's files of the same path.
	Files      map[string]string
	Entrypoint []string
	Cmd        []string
	Env        []string
	WorkingDir string
	User       string
}

// WriteOCI writes img as an OCI image layout in a tar stream (one uncompressed layer),
// annotated with its name the way `ctr images import` reads it. scratch is a directory
// for the layer while its digest is computed.
func WriteOCI(w io.Writer, img Image, scratch string) error {
	if img.Ref == "" {
		return fmt.Errorf("image: no reference")
	}
	ref := normalizeRef(img.Ref)
	layer, err := os.CreateTemp(scratch, "layer-*.tar")
	if err != nil {
		return err
	}
	defer os.Remove(layer.Name())
	defer layer.Close()
	h := sha256.New()
	if err := writeLayer(io.MultiWriter(layer, h), img); err != nil {
		return fmt.Errorf("image %s: layer: %w", img.Ref, err)
	}
	layerDigest := digestOf(h)
	layerSize, err := layer.Seek(0, io.SeekCurrent)
	if err != nil {
		return err
	}
	if _, err := layer.Seek(0, io.SeekStart); err != nil {
		return err
	}

	config, err := json.Marshal(map[string]any{
		"architecture": goarch(),
		"os":           "linux",
		"created":      time.Unix(0, 0).UTC().Format(time.RFC3339),
		"config": map[string]any{
			"Entrypoint": img.Entrypoint, "Cmd": img.Cmd, "Env": img.Env,
			"WorkingDir": img.WorkingDir, "User": img.User,
		},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{layerDigest}},
	})
	if err != nil {
		return err
	}
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        descriptor("application/vnd.oci.image.config.v1+json", config),
		"layers": []any{map[string]any{
			"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layerDigest, "size": layerSize,
		}},
	})
	if err != nil {
		return err
	}
	md := descriptor("application/vnd.oci.image.manifest.v1+json", manifest)
	md["annotations"] = map[string]string{"io.containerd.image.name": ref, "org.opencontainers.image.ref.name": refTag(ref)}
	md["platform"] = map[string]string{"architecture": goarch(), "os": "linux"}
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": []any{md},
	})
	if err != nil {
		return err
	}

	tw := tar.NewWriter(w)
	put := func(name string, b []byte) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(b)), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err := tw.Write(b)
		return err
	}
	if err := put("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return err
	}
	if err := put("index.json", index); err != nil {
		return err
	}
	if err := put(blobPath(digestOfBytes(config)), config); err != nil {
		return err
	}
	if err := put(blobPath(digestOfBytes(manifest)), manifest); err != nil {
		return err
	}
	if err := tw.WriteHeader(&tar.Header{Name: blobPath(layerDigest), Mode: 0o644, Size: layerSize, Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	if _, err := io.Copy(tw, layer); err != nil {
		return err
	}
	return tw.Close()
}

// writeLayer writes the image's file tree as a tar: Rootfs's tree, then Files (with the
// directories above them).
func writeLayer(w io.Writer, img Image) error {
	tw := tar.NewWriter(w)
	dirs := map[string]bool{}
	if img.Rootfs != "" {
		err := filepath.WalkDir(img.Rootfs, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, err := filepath.Rel(img.Rootfs, p)
			if err != nil || rel == "." {
				return err
			}
			name := filepath.ToSlash(rel)
			if _, over := img.Files["/"+name]; over {
				return nil
			}
			fi, err := d.Info()
			if err != nil {
				return err
			}
			if d.IsDir() {
				dirs[name] = true
			}
			return addFile(tw, p, name, fi)
		})
		if err != nil {
			return err
		}
	}
	names := make([]string, 0, len(img.Files))
	for name := range img.Files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		clean := strings.TrimPrefix(path.Clean("/"+name), "/")
		if clean == "" {
			return fmt.Errorf("file %q: not a file path", name)
		}
		var parents []string
		for d := path.Dir(clean); d != "." && !dirs[d]; d = path.Dir(d) {
			parents = append([]string{d}, parents...)
		}
		for _, d := range parents {
			dirs[d] = true
			if err := tw.WriteHeader(&tar.Header{Name: d + "/", Typeflag: tar.TypeDir, Mode: 0o755}); err != nil {
				return err
			}
		}
		host := img.Files[name]
		fi, err := os.Stat(host)
		if err != nil {
			return fmt.Errorf("file %s: %w", name, err)
		}
		if !fi.Mode().IsRegular() {
			return fmt.Errorf("file %s: %s is not a regular file", name, host)
		}
		if err := addFile(tw, host, clean, fi); err != nil {
			return err
		}
	}
	return tw.Close()
}

// addFile writes one entry: a directory, a regular file, or a symlink; other kinds
// (sockets, devices, pipes) are left out.
func addFile(tw *tar.Writer, host, name string, fi fs.FileInfo) error {
	var link string
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		var err error
		if link, err = os.Readlink(host); err != nil {
			return err
		}
	case fi.IsDir(), fi.Mode().IsRegular():
	default:
		return nil
	}
	hdr, err := tar.FileInfoHeader(fi, link)
	if err != nil {
		return err
	}
	hdr.Name = name
	if fi.IsDir() {
		hdr.Name += "/"
	}
	hdr.Uname, hdr.Gname = "", ""
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		hdr.Uid, hdr.Gid = int(st.Uid), int(st.Gid)
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return nil
	}
	f, err := os.Open(host)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := io.CopyN(tw, f, fi.Size()); err != nil {
		return fmt.Errorf("%s: %w", host, err)
	}
	return nil
}

// ImportImage makes img and imports it into every node's containerd (namespace k8s.io,
// where the kubelet's images are), unpacked for its snapshotter. The tarball is kept, for
// a node added later (AddNode).
func (c *Cluster) ImportImage(ctx context.Context, img Image) error {
	f, err := os.CreateTemp(filepath.Join(c.Dir, "images"), "image-*.tar")
	if err != nil {
		return err
	}
	if err := c.writeImage(f, img); err != nil {
		return err
	}
	// Held while importing, so that a node being added gets it either here or there.
	c.nodesMu.Lock()
	defer c.nodesMu.Unlock()
	for _, n := range c.nodes {
		if out, err := c.ctrAt(ctx, n.sock(), "images", "import", "--platform", "linux/"+goarch(), f.Name()); err != nil {
			return fmt.Errorf("import image %s into node %s: %w: %s", img.Ref, n.name, err, out)
		}
	}
	c.imageFiles = append(c.imageFiles, f.Name())
	return nil
}

// importInto makes img and imports it into the containerd at sock, without keeping it.
func (c *Cluster) importInto(ctx context.Context, sock string, img Image) error {
	f, err := os.CreateTemp(filepath.Join(c.Dir, "images"), "image-*.tar")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if err := c.writeImage(f, img); err != nil {
		return err
	}
	if out, err := c.ctrAt(ctx, sock, "images", "import", "--platform", "linux/"+goarch(), f.Name()); err != nil {
		return fmt.Errorf("import image %s: %w: %s", img.Ref, err, out)
	}
	return nil
}

// writeImage writes img to f as an OCI tarball, and closes f.
func (c *Cluster) writeImage(f *os.File, img Image) error {
	scratch, err := os.MkdirTemp(c.Dir, "image-")
	if err != nil {
		f.Close()
		return err
	}
	defer os.RemoveAll(scratch)
	if err := WriteOCI(f, img, scratch); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// ctr runs containerd's client against the first node's containerd, in namespace k8s.io,
// and returns its standard output (with its standard error on failure).
func (c *Cluster) ctr(ctx context.Context, args ...string) (string, error) {
	return c.ctrAt(ctx, c.containerdSock, args...)
}

// ctrAt is ctr against the containerd at sock.
func (c *Cluster) ctrAt(ctx context.Context, sock string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(c.bin, "ctr"), append([]string{"--address", sock, "--namespace", "k8s.io"}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out) + stderr.String(), err
	}
	return string(out), nil
}

func descriptor(mediaType string, b []byte) map[string]any {
	return map[string]any{"mediaType": mediaType, "digest": digestOfBytes(b), "size": len(b)}
}

func digestOf(h hash.Hash) string { return "sha256:" + hex.EncodeToString(h.Sum(nil)) }

func digestOfBytes(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func blobPath(digest string) string { return "blobs/sha256/" + strings.TrimPrefix(digest, "sha256:") }

// normalizeRef spells a reference the way the kubelet asks containerd for it:
// "busybox" is docker.io/library/busybox:latest.
func normalizeRef(ref string) string {
	name, tag := ref, ""
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		name, tag = ref[:i], ref[i:]
	}
	if tag == "" && !strings.Contains(ref, "@") {
		tag = ":latest"
	}
	first, _, found := strings.Cut(name, "/")
	switch {
	case !found:
		name = "docker.io/library/" + name
	case !strings.ContainsAny(first, ".:") && first != "localhost":
		name = "docker.io/" + name
	}
	return name + tag
}

func refTag(ref string) string {
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		return ref[i+1:]
	}
	return "latest"
}
