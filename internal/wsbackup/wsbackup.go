// Package wsbackup backs up a sandbox's workspace history (package history's store: blobs
// named by their SHA-256, and index.json) to an S3-compatible bucket, incrementally and
// encrypted on this side, and restores it into a fresh history directory.
//
// Objects. A blob is stored once per bucket prefix, under blobs/<HMAC-SHA-256(name key,
// its hash)>, so the bucket shows neither which files a user has nor their sizes beyond
// the ciphertext's; a backup uploads only the blobs the bucket lacks. Each backup writes a
// manifest, sandboxes/<id>/manifests/<time>, holding the index and the hashes of lists
// (blobs themselves) of the blobs it needs, grouped so that a one-file edit changes few. Every object is sealed with XChaCha20-Poly1305 under a key derived from
// the backup key, with the object's name as associated data: a changed, truncated,
// swapped or replayed object fails to open, and a blob whose plaintext does not hash to
// its name is refused. The backup key is the control plane's; the sandbox never sees it.
package wsbackup

import (
	"bytes"
	"context"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/minio/minio-go/v7"
	"golang.org/x/crypto/chacha20poly1305"
	"golang.org/x/sys/unix"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/errdefs"
)

// KeySize is the backup key's length in bytes.
const KeySize = 32

// IDFormat is a backup's ID (api.BackupIDFormat).
const IDFormat = api.BackupIDFormat

// ParseID is the time of backup ID id (api.ParseBackupID).
func ParseID(id string) (time.Time, error) { return api.ParseBackupID(id) }

// clock is the time a backup is named by.
var clock = time.Now

// Target is where backups go: a bucket of an S3-compatible store, under a prefix.
type Target struct {
	Client *minio.Client
	Bucket string
	Prefix string // "" or ending in "/"
}

// Backup is what one backup did.
type Backup struct {
	At            time.Time
	Manifest      string // the manifest's object name
	ID            string // the backup's ID: its time as the manifest's name has it
	Checkpoint    string // the history's current checkpoint
	Blobs         int    // blobs the manifest lists
	Uploaded      int    // blobs uploaded now (the rest were in the bucket)
	UploadedBytes int64  // ciphertext bytes uploaded, manifest included
}

// manifest is a backup's manifest object, sealed.
type manifest struct {
	Format  string    `json:"format"`
	Sandbox string    `json:"sandbox"`
	At      time.Time `json:"at"`
	Index   []byte    `json:"index"` // index.json as it was
	// Lists are the blobs that list the SHA-256 of every blob the backup needs, one a
	// line, grouped by their first hex digits: a one-file edit changes a few of them,
	// and the manifest stays small. Count is how many blobs they list. Blobs is the
	// same list inline, as the first backups wrote it.
	Lists []string `json:"lists,omitempty"`
	Count int      `json:"count,omitempty"`
	Blobs []string `json:"blobs,omitempty"`
	// Checkpoint is the history's current checkpoint; Uploaded and UploadedBytes are the
	// blobs this backup uploaded, the rest being in the bucket already.
	Checkpoint    string `json:"checkpoint,omitempty"`
	Uploaded      int    `json:"uploaded,omitempty"`
	UploadedBytes int64  `json:"uploaded_bytes,omitempty"`
	// Record is the control plane's record of the sandbox (its name, limits, policy...),
	// opaque here, sealed with the rest.
	Record json.RawMessage `json:"record,omitempty"`
}

const manifestFormat = "paddock-workspace-backup 1"

type keys struct {
	sealKey, nameKey []byte
	aead             cipher.AEAD // under sealKey; safe for concurrent use
}

func derive(key []byte) (keys, error) {
	if len(key) != KeySize {
		return keys{}, fmt.Errorf("backup key: %d bytes, want %d: %w", len(key), KeySize, errdefs.ErrInvalidArgument)
	}
	d := func(label string) []byte {
		m := hmac.New(sha256.New, key)
		m.Write([]byte("paddock workspace backup v1\x00" + label))
		return m.Sum(nil)
	}
	k := keys{sealKey: d("seal"), nameKey: d("name")}
	aead, err := chacha20poly1305.NewX(k.sealKey)
	if err != nil {
		return keys{}, err
	}
	k.aead = aead
	return k, nil
}

func (k keys) blobName(t Target, sum string) string {
	m := hmac.New(sha256.New, k.nameKey)
	m.Write([]byte(sum))
	return t.Prefix + "blobs/" + hex.EncodeToString(m.Sum(nil))
}

// Namespace is the folder under a bucket's prefix that the backups sealed under key go
// to: an HMAC of the key, so installs with their own keys sharing a bucket and prefix
// never read, list or delete each other's objects, and a new server given the same key
// finds the old one's backups.
func Namespace(key []byte) (string, error) {
	k, err := derive(key)
	if err != nil {
		return "", err
	}
	m := hmac.New(sha256.New, k.nameKey)
	m.Write([]byte("namespace"))
	return hex.EncodeToString(m.Sum(nil))[:16], nil
}

// Namespaces lists the namespaces (each key's folder) under shared, the bucket and prefix
// several installs may share.
func Namespaces(ctx context.Context, shared Target) ([]string, error) {
	var out []string
	for o := range shared.Client.ListObjects(ctx, shared.Bucket, minio.ListObjectsOptions{Prefix: shared.Prefix}) {
		if o.Err != nil {
			return nil, fmt.Errorf("list bucket %s: %w: %w", shared.Bucket, errdefs.ErrUnavailable, o.Err)
		}
		ns, ok := strings.CutSuffix(strings.TrimPrefix(o.Key, shared.Prefix), "/")
		if _, err := hex.DecodeString(ns); ok && err == nil && len(ns) == 16 {
			out = append(out, ns)
		}
	}
	return out, nil
}

func manifestPrefix(t Target, sandbox string) string {
	return t.Prefix + "sandboxes/" + sandbox + "/manifests/"
}

// seal encrypts plain for the object name.
func (k keys) seal(name string, plain []byte) ([]byte, error) {
	aead := k.aead
	nonce := make([]byte, aead.NonceSize(), aead.NonceSize()+len(plain)+aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	return aead.Seal(nonce, nonce, plain, []byte(name)), nil
}

// open decrypts an object in place (the plaintext overwrites sealed); one that fails
// authentication is refused naming it.
func (k keys) open(name string, sealed []byte) ([]byte, error) {
	aead := k.aead
	if len(sealed) < aead.NonceSize()+aead.Overhead() {
		return nil, fmt.Errorf("backup object %s: %d bytes, too short to be sealed: %w", name, len(sealed), errdefs.ErrDataLoss)
	}
	ns := aead.NonceSize()
	plain, err := aead.Open(sealed[ns:ns], sealed[:ns], sealed[ns:], []byte(name))
	if err != nil {
		return nil, fmt.Errorf("backup object %s: fails authentication (changed, damaged, or sealed under another key): %w", name, errdefs.ErrDataLoss)
	}
	return plain, nil
}

func validSum(s string) bool {
	if len(s) != 64 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil && strings.ToLower(s) == s
}

func validSandbox(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// Run backs up the history store at dir (package history's layout) of sandbox: see RunFrom.
func Run(ctx context.Context, t Target, key []byte, sandbox, dir string) (Backup, error) {
	return RunWithRecord(ctx, t, key, sandbox, dir, nil)
}

// RunWithRecord is Run with the sandbox's record (JSON, or nil) kept in the manifest;
// RestoreWithRecord gives it back.
func RunWithRecord(ctx context.Context, t Target, key []byte, sandbox, dir string, record json.RawMessage) (Backup, error) {
	return RunFrom(ctx, t, key, sandbox, Dir(dir), record)
}

// RunFrom backs up the history store src of sandbox, with its record (JSON, or nil) kept
// in the manifest. It lists the store (its index first, so every blob the index names is
// listed) and uploads the blobs the bucket lacks.
//
// A blob the bucket holds is skipped only when the sandbox's own newest backup named it:
// another blob the bucket holds (another sandbox's) is read from src and hashed first, so
// that a store that lists a hash it does not hold cannot make a manifest name, and a
// restore hand it, another sandbox's file.
func RunFrom(ctx context.Context, t Target, key []byte, sandbox string, src Source, record json.RawMessage) (Backup, error) {
	var b Backup
	k, err := derive(key)
	if err != nil {
		return b, err
	}
	if !validSandbox(sandbox) {
		return b, fmt.Errorf("backup: sandbox %q: %w", sandbox, errdefs.ErrInvalidArgument)
	}
	index, blobs, err := src.List(ctx)
	if err != nil {
		return b, fmt.Errorf("backup %s: %w", sandbox, err)
	}
	if err := checkListing(index, blobs); err != nil {
		return b, fmt.Errorf("backup %s: %w", sandbox, err)
	}
	sort.Slice(blobs, func(i, j int) bool { return blobs[i].Sum < blobs[j].Sum })
	sums := make([]string, len(blobs))
	for i, x := range blobs {
		sums[i] = x.Sum
	}
	have := map[string]bool{}
	for o := range t.Client.ListObjects(ctx, t.Bucket, minio.ListObjectsOptions{Prefix: t.Prefix + "blobs/", Recursive: true}) {
		if o.Err != nil {
			return b, fmt.Errorf("backup %s: list bucket %s: %w: %w", sandbox, t.Bucket, errdefs.ErrUnavailable, o.Err)
		}
		have[o.Key] = true
	}
	lists := listsOf(sums)
	proven, err := k.proven(ctx, t, sandbox, lists)
	if err != nil {
		return b, fmt.Errorf("backup %s: %w", sandbox, err)
	}
	var read []Blob
	for _, x := range blobs {
		if !have[k.blobName(t, x.Sum)] || !proven[x.Sum] {
			read = append(read, x)
		}
	}
	err = src.Read(ctx, read, func(sum string, plain []byte) error {
		i := sort.Search(len(read), func(i int) bool { return read[i].Sum >= sum })
		if i == len(read) || read[i].Sum != sum {
			return fmt.Errorf("the history sent blob %s, which was not asked for: %w", errdefs.Clip(sum, 80), errdefs.ErrDataLoss)
		}
		if err := checkBlob(read[i], plain); err != nil {
			return err
		}
		name := k.blobName(t, sum)
		if have[name] {
			return nil // the sandbox holds it: no need to upload it again
		}
		n, err := k.put(ctx, t, name, plain)
		if err != nil {
			return err
		}
		have[name] = true
		b.Uploaded++
		b.UploadedBytes += n
		return nil
	})
	if err != nil {
		return b, fmt.Errorf("backup %s: %w", sandbox, err)
	}
	listSums := make([]string, 0, len(lists))
	for _, plain := range lists {
		got := sha256.Sum256(plain)
		sum := hex.EncodeToString(got[:])
		listSums = append(listSums, sum)
		if name := k.blobName(t, sum); !have[name] {
			n, err := k.put(ctx, t, name, plain)
			if err != nil {
				return b, fmt.Errorf("backup %s: %w", sandbox, err)
			}
			b.UploadedBytes += n
		}
	}
	b.At = clock().UTC()
	b.Blobs = len(sums)
	var pos struct {
		Pos string `json:"pos"`
	}
	_ = json.Unmarshal(index, &pos) // an index without one still backs up
	b.Checkpoint = errdefs.Clip(pos.Pos, 64)
	m, err := json.Marshal(manifest{Format: manifestFormat, Sandbox: sandbox, At: b.At, Index: index, Lists: listSums, Count: len(sums),
		Checkpoint: b.Checkpoint, Uploaded: b.Uploaded, UploadedBytes: b.UploadedBytes, Record: record})
	if err != nil {
		return b, err
	}
	b.ID = b.At.Format(IDFormat)
	b.Manifest = manifestPrefix(t, sandbox) + b.ID
	n, err := k.put(ctx, t, b.Manifest, m)
	if err != nil {
		return b, fmt.Errorf("backup %s: %w", sandbox, err)
	}
	b.UploadedBytes += n
	return b, nil
}

// proven are the blobs sandbox's newest backup under t named: blobs its store held then,
// read and hashed by a backup. lists are the new backup's lists: an old list among them
// is read here, not fetched. A sandbox without a readable backup has proven none.
func (k keys) proven(ctx context.Context, t Target, sandbox string, lists [][]byte) (map[string]bool, error) {
	out := map[string]bool{}
	all, err := List(ctx, t, sandbox)
	if err != nil || len(all) == 0 {
		return out, err
	}
	name := manifestPrefix(t, sandbox) + all[len(all)-1].Format(IDFormat)
	m, err := k.manifest(ctx, t, sandbox, name)
	if errors.Is(err, errdefs.ErrUnavailable) {
		return nil, err
	}
	if err != nil {
		return out, nil // damaged: everything is read again
	}
	local := make(map[string][]byte, len(lists))
	for _, plain := range lists {
		got := sha256.Sum256(plain)
		local[hex.EncodeToString(got[:])] = plain
	}
	add := func(plain []byte) {
		for _, s := range strings.Fields(string(plain)) {
			out[s] = true
		}
	}
	for _, s := range m.Blobs {
		out[s] = true
	}
	for _, l := range m.Lists {
		if plain, ok := local[l]; ok {
			add(plain)
			continue
		}
		if !validSum(l) {
			return map[string]bool{}, nil
		}
		plain, _, err := k.getBlob(ctx, t, l, nil)
		if errors.Is(err, errdefs.ErrUnavailable) {
			return nil, err
		}
		if err != nil {
			return map[string]bool{}, nil
		}
		add(plain)
	}
	return out, nil
}

func (k keys) put(ctx context.Context, t Target, name string, plain []byte) (int64, error) {
	sealed, err := k.seal(name, plain)
	if err != nil {
		return 0, err
	}
	if _, err := t.Client.PutObject(ctx, t.Bucket, name, bytes.NewReader(sealed), int64(len(sealed)),
		minio.PutObjectOptions{ContentType: "application/octet-stream"}); err != nil {
		return 0, fmt.Errorf("upload %s: %w: %w", name, errdefs.ErrUnavailable, err)
	}
	return int64(len(sealed)), nil
}

func (k keys) get(ctx context.Context, t Target, name string) ([]byte, error) {
	sealed, err := fetch(ctx, t, name, nil)
	if err != nil {
		return nil, err
	}
	return k.open(name, sealed)
}

// maxObject bounds an object's size; maxPrealloc, the buffer reserved for one from its
// stated length.
const (
	maxObject   = 1 << 31
	maxPrealloc = 64 << 20
)

// fetch reads object name whole into buf (grown when short) and returns it. It reads the
// response's body straight (minio-go's Core), sized by its length: no reader goroutine
// per object, no buffer regrown as it fills.
func fetch(ctx context.Context, t Target, name string, buf []byte) ([]byte, error) {
	rd, info, _, err := minio.Core{Client: t.Client}.GetObject(ctx, t.Bucket, name, minio.GetObjectOptions{})
	if err != nil {
		if minio.ToErrorResponse(err).Code == "NoSuchKey" {
			return nil, fmt.Errorf("backup object %s is missing from the bucket: %w", name, errdefs.ErrDataLoss)
		}
		return nil, fmt.Errorf("fetch %s: %w: %w", name, errdefs.ErrUnavailable, err)
	}
	defer rd.Close()
	if info.Size < 0 || info.Size > maxPrealloc {
		// No length given, or a large one: read what comes, within the bound, rather
		// than reserve what a header claims.
		out, err := io.ReadAll(io.LimitReader(rd, maxObject))
		if err != nil {
			return nil, fmt.Errorf("fetch %s: %w: %w", name, errdefs.ErrUnavailable, err)
		}
		return out, nil
	}
	if int64(cap(buf)) < info.Size {
		buf = make([]byte, info.Size)
	}
	buf = buf[:info.Size]
	if _, err := io.ReadFull(rd, buf); err != nil {
		return nil, fmt.Errorf("fetch %s: %w: %w", name, errdefs.ErrUnavailable, err)
	}
	return buf, nil
}

// List returns the times of sandbox's backups, oldest first.
func List(ctx context.Context, t Target, sandbox string) ([]time.Time, error) {
	if !validSandbox(sandbox) {
		return nil, fmt.Errorf("backups of %q: %w", sandbox, errdefs.ErrInvalidArgument)
	}
	var out []time.Time
	pre := manifestPrefix(t, sandbox)
	for o := range t.Client.ListObjects(ctx, t.Bucket, minio.ListObjectsOptions{Prefix: pre, Recursive: true}) {
		if o.Err != nil {
			return nil, fmt.Errorf("backups of %s: list bucket %s: %w: %w", sandbox, t.Bucket, errdefs.ErrUnavailable, o.Err)
		}
		if at, err := time.Parse(IDFormat, strings.TrimPrefix(o.Key, pre)); err == nil {
			out = append(out, at)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Before(out[j]) })
	return out, nil
}

// manifests lists every sandbox's backups under t, by sandbox.
func manifests(ctx context.Context, t Target) (map[string][]time.Time, error) {
	bySandbox := map[string][]time.Time{}
	root := t.Prefix + "sandboxes/"
	for o := range t.Client.ListObjects(ctx, t.Bucket, minio.ListObjectsOptions{Prefix: root, Recursive: true}) {
		if o.Err != nil {
			return nil, fmt.Errorf("list bucket %s: %w: %w", t.Bucket, errdefs.ErrUnavailable, o.Err)
		}
		id, rest, ok := strings.Cut(strings.TrimPrefix(o.Key, root), "/manifests/")
		if at, err := time.Parse(IDFormat, rest); ok && err == nil && validSandbox(id) {
			bySandbox[id] = append(bySandbox[id], at)
		}
	}
	return bySandbox, nil
}

// Stored is a sandbox whose backups the bucket holds.
type Stored struct {
	Sandbox string
	Backups int
	Newest  time.Time
	// Record is the sandbox's record as its newest backup kept it (nil when it kept
	// none); Err is why that manifest could not be read (missing, failing
	// authentication: a wrong key).
	Record json.RawMessage
	Err    error
}

// Sandboxes lists the sandboxes with backups under t, by ID, each with the record its
// newest backup kept: what a server that lost its database can restore.
func Sandboxes(ctx context.Context, t Target, key []byte) ([]Stored, error) {
	k, err := derive(key)
	if err != nil {
		return nil, err
	}
	bySandbox, err := manifests(ctx, t)
	if err != nil {
		return nil, fmt.Errorf("backups: %w", err)
	}
	out := make([]Stored, 0, len(bySandbox))
	for id, times := range bySandbox {
		s := Stored{Sandbox: id, Backups: len(times)}
		for _, at := range times {
			if at.After(s.Newest) {
				s.Newest = at
			}
		}
		m, err := k.manifest(ctx, t, id, manifestPrefix(t, id)+s.Newest.Format(IDFormat))
		if errors.Is(err, errdefs.ErrUnavailable) {
			return nil, fmt.Errorf("backups: %w", err)
		}
		s.Record, s.Err = m.Record, err
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Sandbox < out[j].Sandbox })
	return out, nil
}

// RecordAt is the sandbox's record (nil when it kept none) as its newest backup at or
// before at (zero: the newest) kept it, and that backup's time: what a server that never
// had the sandbox knows of it. No backup there is [errdefs.ErrNotFound].
func RecordAt(ctx context.Context, t Target, key []byte, sandbox string, at time.Time) (time.Time, json.RawMessage, error) {
	k, err := derive(key)
	if err != nil {
		return time.Time{}, nil, err
	}
	all, err := List(ctx, t, sandbox)
	if err != nil {
		return time.Time{}, nil, err
	}
	pick := picked(all, at)
	if pick.IsZero() {
		return pick, nil, fmt.Errorf("backups of %s: none at or before %v: %w", sandbox, at, errdefs.ErrNotFound)
	}
	m, err := k.manifest(ctx, t, sandbox, manifestPrefix(t, sandbox)+pick.Format(IDFormat))
	return pick, m.Record, err
}

// picked is the newest of all (oldest first) at or before at (zero: the newest); zero
// when there is none.
func picked(all []time.Time, at time.Time) time.Time {
	var pick time.Time
	for _, a := range all {
		if at.IsZero() || !a.After(at) {
			pick = a
		}
	}
	return pick
}

// manifest fetches, opens and checks the manifest name of sandbox id.
func (k keys) manifest(ctx context.Context, t Target, id, name string) (manifest, error) {
	var m manifest
	plain, err := k.get(ctx, t, name)
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(plain, &m); err != nil || m.Format != manifestFormat || m.Sandbox != id {
		return manifest{}, fmt.Errorf("manifest %s is not this sandbox's backup: %w", name, errdefs.ErrDataLoss)
	}
	return m, nil
}

// Restore writes the newest backup of sandbox at or before at (zero: the newest) into
// dir, a history directory that must not exist yet, and returns its time. Every object is
// authenticated and every blob checked against its hash before anything is written; a
// bad or missing one is refused, naming it.
func Restore(ctx context.Context, t Target, key []byte, sandbox string, at time.Time, dir string) (time.Time, error) {
	pick, _, err := RestoreWithRecord(ctx, t, key, sandbox, at, dir)
	return pick, err
}

// RestoreWithRecord is Restore that also returns the sandbox's record the backup kept
// (nil when it kept none).
func RestoreWithRecord(ctx context.Context, t Target, key []byte, sandbox string, at time.Time, dir string) (time.Time, json.RawMessage, error) {
	k, err := derive(key)
	if err != nil {
		return time.Time{}, nil, err
	}
	all, err := List(ctx, t, sandbox)
	if err != nil {
		return time.Time{}, nil, err
	}
	return k.restore(ctx, t, sandbox, all, at, dir)
}

// restore is RestoreWithRecord once the backups' times are listed.
func (k keys) restore(ctx context.Context, t Target, sandbox string, all []time.Time, at time.Time, dir string) (time.Time, json.RawMessage, error) {
	pick := picked(all, at)
	if pick.IsZero() {
		return pick, nil, fmt.Errorf("restore %s: no backup at or before %v: %w", sandbox, at, errdefs.ErrNotFound)
	}
	name := manifestPrefix(t, sandbox) + pick.Format(IDFormat)
	plain, err := k.get(ctx, t, name)
	if err != nil {
		return pick, nil, fmt.Errorf("restore %s: %w", sandbox, err)
	}
	var m manifest
	if err := json.Unmarshal(plain, &m); err != nil || m.Format != manifestFormat || m.Sandbox != sandbox {
		return pick, nil, fmt.Errorf("restore %s: manifest %s is not this sandbox's backup: %w", sandbox, name, errdefs.ErrDataLoss)
	}
	sums, err := k.sums(ctx, t, name, m)
	if err != nil {
		return pick, nil, fmt.Errorf("restore %s: %w", sandbox, err)
	}
	// The blobs go straight into dir, made here: the caller publishes it (it is new, and
	// theirs), so no temporary directory and rename. A failure removes it.
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return pick, nil, fmt.Errorf("restore %s: %w", sandbox, err)
	}
	if err := os.Mkdir(dir, 0o700); errors.Is(err, fs.ErrExist) {
		return pick, nil, fmt.Errorf("restore %s: %s already exists: %w", sandbox, dir, errdefs.ErrAlreadyExists)
	} else if err != nil {
		return pick, nil, fmt.Errorf("restore %s: %w", sandbox, err)
	}
	err = k.fetchBlobs(ctx, t, sums, filepath.Join(dir, "objects"))
	if err != nil {
		err = fmt.Errorf("restore %s: %w", sandbox, err)
	} else {
		err = os.WriteFile(filepath.Join(dir, "index.json"), m.Index, 0o600)
	}
	if err != nil {
		return pick, nil, errors.Join(err, os.RemoveAll(dir))
	}
	return pick, m.Record, nil
}

// Entry is one backup as its manifest tells it.
type Entry struct {
	ID            string
	At            time.Time
	Checkpoint    string
	Blobs         int
	Uploaded      int
	UploadedBytes int64
	// Err is why the manifest could not be read (missing, or failing authentication);
	// the other fields but ID and At are then empty.
	Err error
}

// Entries lists sandbox's backups, oldest first, each read from its manifest.
func Entries(ctx context.Context, t Target, key []byte, sandbox string) ([]Entry, error) {
	k, err := derive(key)
	if err != nil {
		return nil, err
	}
	all, err := List(ctx, t, sandbox)
	if err != nil {
		return nil, err
	}
	out := make([]Entry, 0, len(all))
	for _, at := range all {
		e := Entry{ID: at.Format(IDFormat), At: at}
		name := manifestPrefix(t, sandbox) + e.ID
		plain, err := k.get(ctx, t, name)
		if errors.Is(err, errdefs.ErrUnavailable) {
			return nil, fmt.Errorf("backups of %s: %w", sandbox, err)
		}
		var m manifest
		switch {
		case err != nil:
			e.Err = err
		case json.Unmarshal(plain, &m) != nil || m.Format != manifestFormat || m.Sandbox != sandbox:
			e.Err = fmt.Errorf("manifest %s is not this sandbox's backup: %w", name, errdefs.ErrDataLoss)
		default:
			e.Checkpoint, e.Blobs, e.Uploaded, e.UploadedBytes = m.Checkpoint, len(m.Blobs)+m.Count, m.Uploaded, m.UploadedBytes
		}
		out = append(out, e)
	}
	return out, nil
}

// listsOf groups sums (a history's blobs) into the plaintexts of list blobs: sorted, one
// a line, a list per leading hex digits, with as many digits as keep lists near 64 lines.
func listsOf(sums []string) [][]byte {
	sorted := append([]string(nil), sums...)
	sort.Strings(sorted)
	d := 0
	for d < 3 && len(sorted)>>(4*d) > 64 {
		d++
	}
	var out [][]byte
	var cur []byte
	for i, s := range sorted {
		cur = append(cur, s...)
		cur = append(cur, '\n')
		if i == len(sorted)-1 || sorted[i+1][:d] != s[:d] {
			out = append(out, cur)
			cur = nil
		}
	}
	return out
}

// getBlob fetches the blob whose SHA-256 is sum, checking it hashes to it. buf, when long
// enough, holds the object (sealed: what was fetched, the blob opened inside it).
func (k keys) getBlob(ctx context.Context, t Target, sum string, buf []byte) (blob, sealed []byte, err error) {
	name := k.blobName(t, sum)
	sealed, err = fetch(ctx, t, name, buf)
	if err != nil {
		return nil, nil, err
	}
	blob, err = k.open(name, sealed)
	if err != nil {
		return nil, nil, err
	}
	if got := sha256.Sum256(blob); hex.EncodeToString(got[:]) != sum {
		return nil, nil, fmt.Errorf("backup object %s does not hash to %s: %w", name, sum, errdefs.ErrDataLoss)
	}
	return blob, sealed, nil
}

// sums are the blobs manifest m (named name) needs: its lists' lines, or its inline list.
func (k keys) sums(ctx context.Context, t Target, name string, m manifest) ([]string, error) {
	out := m.Blobs
	for _, l := range m.Lists {
		if !validSum(l) {
			return nil, fmt.Errorf("manifest %s names %q, not a hash: %w", name, l, errdefs.ErrDataLoss)
		}
	}
	lists := make([][]byte, len(m.Lists))
	err := parallel(ctx, len(m.Lists), func(ctx context.Context, i int) error {
		var err error
		lists[i], _, err = k.getBlob(ctx, t, m.Lists[i], nil)
		return err
	})
	if err != nil {
		return nil, err
	}
	for _, plain := range lists {
		out = append(out, strings.Fields(string(plain))...)
	}
	for _, sum := range out {
		if !validSum(sum) {
			return nil, fmt.Errorf("manifest %s names %q, not a hash: %w", name, sum, errdefs.ErrDataLoss)
		}
	}
	return out, nil
}

// RestoreParallel is how many blobs a restore fetches at once.
const RestoreParallel = 4

// restoreWriters is how many blob files a restore creates at once: enough that a file
// system slow to create files (waiting on its journal) does not hold the fetches back.
const restoreWriters = 8

// buffers are the sealed objects' buffers a restore reuses: a blob is opened in place
// and the buffer goes back once its file is written.
var buffers = sync.Pool{New: func() any { return new([]byte) }}

// objectDirs makes dir and, inside it, the fan-out directories (the hash's first two hex
// digits) that sums need, and opens each: every blob is then created relative to its
// directory's descriptor, with no walk of the whole path per file.
func objectDirs(dir string, sums []string) (*[256]int, func(), error) {
	fds := new([256]int)
	for i := range fds {
		fds[i] = -1
	}
	done := func() {
		for _, fd := range fds {
			if fd >= 0 {
				unix.Close(fd)
			}
		}
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, done, err
	}
	root, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, done, fmt.Errorf("open %s: %w", dir, err)
	}
	defer unix.Close(root)
	for _, sum := range sums {
		i := fanOut(sum)
		if fds[i] >= 0 {
			continue
		}
		sub := sum[:2]
		if err := unix.Mkdirat(root, sub, 0o700); err != nil {
			return nil, done, fmt.Errorf("make %s/%s: %w", dir, sub, err)
		}
		if fds[i], err = unix.Openat(root, sub, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
			return nil, done, fmt.Errorf("open %s/%s: %w", dir, sub, err)
		}
	}
	return fds, done, nil
}

// fanOut is the index of sum's fan-out directory: its first byte (sum is a valid hash).
func fanOut(sum string) int {
	hi, lo := strings.IndexByte(hexDigits, sum[0]), strings.IndexByte(hexDigits, sum[1])
	return hi<<4 | lo
}

const hexDigits = "0123456789abcdef"

// writeBlob creates blob sum in its fan-out directory fd, read-only as package history
// keeps it: open, write, close, and nothing else.
func writeBlob(fd int, sum string, blob []byte) error {
	f, err := unix.Openat(fd, sum[2:], unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o400)
	if err != nil {
		return fmt.Errorf("restore blob %s: %w", sum, err)
	}
	for len(blob) > 0 {
		n, err := unix.Write(f, blob)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			unix.Close(f)
			return fmt.Errorf("restore blob %s: %w", sum, err)
		}
		blob = blob[n:]
	}
	if err := unix.Close(f); err != nil {
		return fmt.Errorf("restore blob %s: %w", sum, err)
	}
	return nil
}

// fetchBlobs fetches every blob of sums into dir, which it makes (package history's
// objects layout): RestoreParallel fetchers, each authenticating and hashing what it
// fetched, hand the blobs to restoreWriters writers, so that neither the round trips nor
// the file creation waits on the other. Nothing is synced: the caller copies the history
// where it is kept. The first failure stops the rest.
func (k keys) fetchBlobs(ctx context.Context, t Target, sums []string, dir string) error {
	dirs, closeDirs, err := objectDirs(dir, sums)
	defer closeDirs()
	if err != nil {
		return err
	}
	type fetched struct {
		sum  string
		blob []byte
		buf  *[]byte
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	writes := make(chan fetched, 2*restoreWriters)
	var writers sync.WaitGroup
	for range restoreWriters {
		writers.Add(1)
		go func() {
			defer writers.Done()
			for f := range writes {
				if ctx.Err() == nil {
					if err := writeBlob(dirs[fanOut(f.sum)], f.sum, f.blob); err != nil {
						cancel(err)
					}
				}
				buffers.Put(f.buf)
			}
		}()
	}
	err = parallel(ctx, len(sums), func(ctx context.Context, i int) error {
		buf := buffers.Get().(*[]byte)
		blob, sealed, err := k.getBlob(ctx, t, sums[i], *buf)
		if err != nil {
			buffers.Put(buf)
			return err
		}
		*buf = sealed[:0] // grown for this blob, if it had to be: kept for the next
		select {
		case writes <- fetched{sums[i], blob, buf}:
			return nil
		case <-ctx.Done():
			buffers.Put(buf)
			return context.Cause(ctx)
		}
	})
	close(writes)
	writers.Wait()
	if err != nil {
		return err
	}
	return context.Cause(ctx)
}

// parallel runs fn for 0..n-1, RestoreParallel at a time, until one fails; it returns
// the first failure.
func parallel(ctx context.Context, n int, fn func(context.Context, int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	work := make(chan int)
	var wg sync.WaitGroup
	for range RestoreParallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				if ctx.Err() != nil {
					continue
				}
				if err := fn(ctx, i); err != nil {
					cancel(err)
				}
			}
		}()
	}
	for i := range n {
		select {
		case work <- i:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
	}
	close(work)
	wg.Wait()
	return context.Cause(ctx)
}
