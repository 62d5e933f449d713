package history

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// Export format: one stream that carries a history to another host, self-checking so that
// a corrupt or truncated file is refused before anything is changed.
//
//	magic "paddock-history-export-1\n"
//	records, each: kind (1 byte), payload length (8 bytes, big-endian), payload
//	  'I' the index (JSON: checkpoints, position, redo stack), exactly once, first
//	  'B' a blob: its SHA-256 (32 bytes), then its content, which must hash to it
//	  'E' the end: the SHA-256 of every byte before this record; nothing may follow
//
// Every blob a checkpoint reaches is in the export, once. The importer trusts nothing in
// it: it checks every hash, bounds every length, and checks that every blob a checkpoint
// reaches arrived before the history replaces anything.
const (
	exportMagic    = "paddock-history-export-1\n"
	recIndex       = 'I'
	recBlob        = 'B'
	recEnd         = 'E'
	maxIndexRecord = 64 << 20
	maxBlobRecord  = 1 << 40
	importFile     = "import.json" // the imported index, until the import's restore is done
	opImport       = "import"
)

// exported is the part of the index an export carries.
type exported struct {
	Checkpoints []Checkpoint `json:"checkpoints"`
	Pos         string       `json:"pos"`
	Redo        []string     `json:"redo"`
	ForkedBy    string       `json:"forked_by,omitempty"`
	Seq         int          `json:"seq"`
	Compacted   int          `json:"compacted,omitempty"`
}

// Export writes the whole history to w (see the format above). The history is locked
// meanwhile, so the export is one consistent state. Refused while a transaction is open:
// its work is in no checkpoint yet.
func (h *History) Export(w io.Writer) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.finishPending(); err != nil {
		return err
	}
	if h.idx.Tx != nil {
		return h.txOpenErr("export")
	}
	if len(h.idx.Checkpoints) == 0 {
		return fmt.Errorf("export: the history has no checkpoint yet: %w", errdefs.ErrFailedPrecondition)
	}
	var sums []string
	seen := map[string]bool{}
	for _, c := range h.idx.Checkpoints {
		if err := h.collect(seen, &sums, c.Tree); err != nil {
			return fmt.Errorf("export: checkpoint %s: %w", c.ID, err)
		}
	}
	slices.Sort(sums)
	sum := sha256.New()
	out := io.MultiWriter(w, sum)
	if _, err := io.WriteString(out, exportMagic); err != nil {
		return fmt.Errorf("export: %w", err)
	}
	idx, err := json.Marshal(exported{Checkpoints: h.idx.Checkpoints, Pos: h.idx.Pos, Redo: h.idx.Redo,
		ForkedBy: h.idx.ForkedBy, Seq: h.idx.Seq, Compacted: h.idx.Compacted})
	if err != nil {
		return fmt.Errorf("export: encode index: %w", err)
	}
	if err := writeRecord(out, recIndex, int64(len(idx)), bytes.NewReader(idx)); err != nil {
		return err
	}
	for _, s := range sums {
		if err := h.exportBlob(out, s); err != nil {
			return err
		}
	}
	return writeRecord(w, recEnd, sha256.Size, bytes.NewReader(sum.Sum(nil)))
}

// collect appends tree sum and every blob under it not seen yet.
func (h *History) collect(seen map[string]bool, sums *[]string, sum string) error {
	if seen[sum] {
		return nil
	}
	seen[sum] = true
	*sums = append(*sums, sum)
	es, err := h.tree(sum)
	if err != nil {
		return err
	}
	for _, e := range es {
		switch {
		case e.Kind == kindDir:
			if err := h.collect(seen, sums, e.Hash); err != nil {
				return err
			}
		case e.Kind == kindFile && !seen[e.Hash]:
			seen[e.Hash] = true
			*sums = append(*sums, e.Hash)
		}
	}
	return nil
}

func (h *History) exportBlob(w io.Writer, sum string) error {
	fi, err := os.Stat(h.blobs.path(sum))
	if err != nil {
		return fmt.Errorf("export: blob %s is missing from the history store: %w", sum[:12], errdefs.ErrDataLoss)
	}
	r, err := h.blobs.open(sum)
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	defer r.Close()
	raw, _ := hex.DecodeString(sum)
	return writeRecord(w, recBlob, sha256.Size+fi.Size(), io.MultiReader(bytes.NewReader(raw), r))
}

func writeRecord(w io.Writer, kind byte, n int64, payload io.Reader) error {
	var head [9]byte
	head[0] = kind
	binary.BigEndian.PutUint64(head[1:], uint64(n))
	if _, err := w.Write(head[:]); err != nil {
		return fmt.Errorf("export: %w", err)
	}
	copied, err := io.Copy(w, payload)
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	if copied != n {
		return fmt.Errorf("export: a blob changed size while it was exported: %w", errdefs.ErrDataLoss)
	}
	return nil
}

// badExport is the error of an export that cannot be imported: it names what is wrong.
func badExport(format string, args ...any) error {
	return fmt.Errorf("history export is unusable: %s: %w", fmt.Sprintf(format, args...), errdefs.ErrInvalidArgument)
}

// readExport parses an export, handing each blob to put (which must read it whole and
// fail if it does not hash to sum) and returning the index, checked for consistency. It
// fails, naming what was wrong, on a stream that is not an export, is corrupt or truncated.
func readExport(r io.Reader, put func(sum string, content io.Reader) error) (*exported, error) {
	sum := sha256.New()
	tr := io.TeeReader(r, sum)
	magic := make([]byte, len(exportMagic))
	if _, err := io.ReadFull(tr, magic); err != nil || string(magic) != exportMagic {
		return nil, badExport("it does not start as a paddock history export")
	}
	var idx *exported
	blobs := map[string]bool{}
	for rec := 1; ; rec++ {
		before := sum.Sum(nil)
		kind, n, err := readHead(tr, rec)
		if err != nil {
			return nil, err
		}
		switch kind {
		case recIndex:
			if idx != nil || rec != 1 {
				return nil, badExport("record %d: the index must come once, first", rec)
			}
			if idx, err = readIndex(tr, n, rec); err != nil {
				return nil, err
			}
		case recBlob:
			if idx == nil {
				return nil, badExport("record %d: a blob before the index", rec)
			}
			s, err := readBlob(tr, n, rec, put)
			if err != nil {
				return nil, err
			}
			blobs[s] = true
		case recEnd:
			if idx == nil {
				return nil, badExport("record %d: the end before the index", rec)
			}
			return idx, readEnd(r, n, before)
		default:
			return nil, badExport("record %d: unknown kind 0x%02x", rec, kind)
		}
	}
}

func readHead(r io.Reader, rec int) (byte, int64, error) {
	var head [9]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return 0, 0, badExport("truncated: it ends at record %d, before its end record", rec)
	}
	n := binary.BigEndian.Uint64(head[1:])
	if n > maxBlobRecord {
		return 0, 0, badExport("record %d: length %d is out of bounds", rec, n)
	}
	return head[0], int64(n), nil
}

func readIndex(r io.Reader, n int64, rec int) (*exported, error) {
	if n > maxIndexRecord {
		return nil, badExport("record %d: the index is %d bytes, over %d", rec, n, maxIndexRecord)
	}
	// Read, not allocated from the length: a short stream cannot make us allocate much.
	data, err := io.ReadAll(io.LimitReader(r, n))
	if err != nil || int64(len(data)) != n {
		return nil, badExport("truncated in record %d (the index)", rec)
	}
	var idx exported
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&idx); err != nil {
		return nil, badExport("record %d: the index is not valid: %v", rec, err)
	}
	if err := idx.check(); err != nil {
		return nil, err
	}
	return &idx, nil
}

func readBlob(r io.Reader, n int64, rec int, put func(string, io.Reader) error) (string, error) {
	if n < sha256.Size {
		return "", badExport("record %d: a blob record of %d bytes has no room for its hash", rec, n)
	}
	var raw [sha256.Size]byte
	if _, err := io.ReadFull(r, raw[:]); err != nil {
		return "", badExport("truncated in record %d (a blob)", rec)
	}
	s := hex.EncodeToString(raw[:])
	content := &exactReader{r: r, left: n - sha256.Size}
	err := put(s, content)
	if content.short {
		return "", badExport("truncated in record %d (blob %s): it ends %d bytes short", rec, s[:12], content.left)
	}
	if err != nil {
		return "", fmt.Errorf("record %d (blob %s): %w", rec, s[:12], err)
	}
	if content.left != 0 {
		return "", fmt.Errorf("record %d (blob %s): not read whole", rec, s[:12])
	}
	return s, nil
}

func readEnd(r io.Reader, n int64, want []byte) error {
	if n != sha256.Size {
		return badExport("the end record is %d bytes, want %d", n, sha256.Size)
	}
	got := make([]byte, sha256.Size)
	if _, err := io.ReadFull(r, got); err != nil {
		return badExport("truncated in its end record")
	}
	if !bytes.Equal(got, want) {
		return badExport("its checksum does not match its content (corrupt)")
	}
	if m, _ := r.Read(make([]byte, 1)); m != 0 {
		return badExport("data follows its end record")
	}
	return nil
}

// exactReader reads the next left bytes of r, and says whether r ended before them.
type exactReader struct {
	r     io.Reader
	left  int64
	short bool
}

func (e *exactReader) Read(p []byte) (int, error) {
	if e.left == 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > e.left {
		p = p[:e.left]
	}
	n, err := e.r.Read(p)
	e.left -= int64(n)
	if errors.Is(err, io.EOF) && e.left > 0 {
		e.short = true
		return n, io.ErrUnexpectedEOF
	}
	if errors.Is(err, io.EOF) {
		err = nil
	}
	return n, err
}

// check refuses an index that does not hold together: every ID it names must be one of
// its checkpoints, every tree a SHA-256.
func (x *exported) check() error {
	if len(x.Checkpoints) == 0 {
		return badExport("the index has no checkpoint")
	}
	ids := map[string]bool{}
	for i, c := range x.Checkpoints {
		switch {
		case c.ID == "" || len(c.ID) > 64:
			return badExport("checkpoint %d has no valid ID", i)
		case ids[c.ID]:
			return badExport("checkpoint %q appears twice", c.ID)
		case !validSum(c.Tree):
			return badExport("checkpoint %q: its tree is not a SHA-256", c.ID)
		}
		ids[c.ID] = true
	}
	for _, c := range x.Checkpoints {
		if c.Parent != "" && !ids[c.Parent] {
			return badExport("checkpoint %q: its parent %q is not in the export", c.ID, c.Parent)
		}
	}
	if !ids[x.Pos] {
		return badExport("the current checkpoint %q is not in the export", x.Pos)
	}
	for _, id := range x.Redo {
		if !ids[id] {
			return badExport("redo names checkpoint %q, which is not in the export", id)
		}
	}
	if x.Seq < 0 || x.Compacted < 0 {
		return badExport("the index's counters are negative")
	}
	return nil
}

// putVerified stores r as blob want, failing (and storing nothing) if r does not hash to
// it.
func (s blobStore) putVerified(want string, r io.Reader) (int64, error) {
	tmp, err := os.CreateTemp(filepath.Join(s.dir, tmpDir), "blob-")
	if err != nil {
		return 0, storeErr("create blob", err)
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, h), r)
	if err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return 0, fmt.Errorf("import blob: %w", kindOf(err))
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		tmp.Close()
		os.Remove(tmp.Name())
		return 0, badExport("its content does not match its hash (corrupt)")
	}
	_, stored, err := s.commit(tmp, want, n)
	return stored, err
}

// hashCheck is a put for readExport that stores nothing (the fuzz target's).
func hashCheck(sum string, r io.Reader) error {
	h := sha256.New()
	if _, err := io.Copy(h, r); err != nil {
		return err
	}
	if hex.EncodeToString(h.Sum(nil)) != sum {
		return badExport("its content does not match its hash (corrupt)")
	}
	return nil
}

// Import replaces an empty history with an export (see Export), then restores the
// workspace to the export's current checkpoint. Empty means the history holds nothing an
// import would lose: no transaction, and at most one checkpoint, which the workspace still
// is (a new sandbox's first). Changes not checkpointed yet are checkpointed first, and
// then make the history not empty. Every blob is verified and every checkpoint checked
// whole before anything changes; the switch and the restore are journaled together, so a
// crash leaves either the old history and workspace or the imported ones.
func (h *History) Import(r io.Reader) (Checkpoint, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.finishPending(); err != nil {
		return Checkpoint{}, err
	}
	if h.idx.Tx != nil {
		return Checkpoint{}, h.txOpenErr("import")
	}
	if _, _, err := h.checkpoint(CauseWatcher, "changes found before import", false); err != nil {
		return Checkpoint{}, err
	}
	if n := len(h.idx.Checkpoints); n > 1 {
		return Checkpoint{}, fmt.Errorf("import: this history is not empty (%d checkpoints) and an import would replace it: import into a new sandbox: %w", n, errdefs.ErrFailedPrecondition)
	}
	idx, err := readExport(r, func(sum string, content io.Reader) error {
		n, err := h.blobs.putVerified(sum, content)
		h.size += n
		return err
	})
	if err != nil {
		return Checkpoint{}, fmt.Errorf("import (nothing was changed): %w", err)
	}
	for _, c := range idx.Checkpoints {
		if err := h.checkComplete(c.Tree); err != nil {
			return Checkpoint{}, fmt.Errorf("import (nothing was changed): checkpoint %s: %w", c.ID, err)
		}
	}
	if err := writeJSON(filepath.Join(h.dir, importFile), idx); err != nil {
		return Checkpoint{}, fmt.Errorf("import (nothing was changed): %w", err)
	}
	pos := idx.Checkpoints[slices.IndexFunc(idx.Checkpoints, func(c Checkpoint) bool { return c.ID == idx.Pos })]
	return h.run(journal{Op: opImport, Target: pos.ID, Tree: pos.Tree, Seq: h.idx.Seq}, h.lastScan)
}

// checkComplete fails unless every blob tree sum reaches is in the store (and every tree
// parses): an export missing one is refused, not imported with a hole.
func (h *History) checkComplete(sum string) error {
	es, err := h.tree(sum)
	if errors.Is(err, errdefs.ErrDataLoss) {
		return badExport("tree %s is missing or corrupt", sum[:12])
	}
	if err != nil {
		return err
	}
	for _, e := range es {
		switch e.Kind {
		case kindDir:
			if err := h.checkComplete(e.Hash); err != nil {
				return err
			}
		case kindFile:
			if !validSum(e.Hash) || !h.blobs.has(e.Hash) {
				return badExport("the content of %q (blob %.12s) is missing", e.Name, e.Hash)
			}
		case kindLink:
		default:
			return badExport("entry %q has unknown kind %q", e.Name, e.Kind)
		}
	}
	return nil
}

// applyImport restores the workspace to the imported current checkpoint, then puts the
// imported index in place. The index waiting in importFile says the switch is still to be
// made; its absence, that it was.
func (h *History) applyImport(j journal, have string) (Checkpoint, error) {
	var idx exported
	found, err := readJSON(filepath.Join(h.dir, importFile), &idx)
	if err != nil {
		return Checkpoint{}, err
	}
	if !found {
		c, _ := h.get(h.idx.Pos)
		return c, nil
	}
	if err := h.restoreTree(j.Tree, have); err != nil {
		return Checkpoint{}, fmt.Errorf("import: restore the workspace to checkpoint %s: %w (the journal will finish it when the history is next opened)", j.Target, err)
	}
	_, sc, err := h.scan()
	if err != nil {
		return Checkpoint{}, err
	}
	if err := h.saveCache(sc); err != nil {
		return Checkpoint{}, err
	}
	// New checkpoints are numbered on from Seq: past every imported ID, whatever the
	// export's Seq says.
	seq := max(idx.Seq, h.idx.Seq)
	for _, c := range idx.Checkpoints {
		if n, err := strconv.Atoi(c.ID); err == nil {
			seq = max(seq, n)
		}
	}
	h.idx = index{Checkpoints: idx.Checkpoints, Pos: idx.Pos, Redo: idx.Redo, ForkedBy: idx.ForkedBy,
		Seq: seq, Compacted: idx.Compacted}
	h.reindex()
	if err := h.saveIndex(); err != nil {
		return Checkpoint{}, err
	}
	if err := os.Remove(filepath.Join(h.dir, importFile)); err != nil {
		return Checkpoint{}, storeErr("remove "+importFile, err)
	}
	c, _ := h.get(h.idx.Pos)
	return c, nil
}
