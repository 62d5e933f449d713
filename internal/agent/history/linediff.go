package history

import (
	"bytes"
	"fmt"
	"strings"
	"unicode/utf8"
)

// FileDiff is what one path's content did between two checkpoints: a unified diff of its
// lines when it is text on both sides, or why there is none.
type FileDiff struct {
	Path string
	// Status is "added", "changed" or "removed".
	Status string
	// Binary: one side is not text (a NUL byte in its first 8000 bytes, or not UTF-8).
	Binary bool
	// Unified is the diff (---/+++ headers, @@ hunks, three lines of context); Truncated
	// says it was cut at the limit FileDiffs was given.
	Unified   string
	Truncated bool
	// Note says why a file that is not binary has no diff (too large, not a regular file).
	Note string
}

// maxDiffInput is the largest side a line diff reads; maxDiffCells bounds the table the
// diff of the lines between a common prefix and suffix may take.
const (
	maxDiffInput = 1 << 20
	maxDiffCells = 4 << 20
)

// FileDiffs diffs the content of every path that differs from checkpoint a to checkpoint
// b, each diff cut at limit bytes.
func (h *History) FileDiffs(a, b string, limit int) ([]FileDiff, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ca, err := h.lookup(a)
	if err != nil {
		return nil, err
	}
	cb, err := h.lookup(b)
	if err != nil {
		return nil, err
	}
	d, err := h.diffTrees(ca.Tree, cb.Tree)
	if err != nil {
		return nil, err
	}
	var out []FileDiff
	for _, g := range []struct {
		status string
		paths  []string
	}{{"added", d.Added}, {"changed", d.Changed}, {"removed", d.Removed}} {
		for _, p := range g.paths {
			ea, _, err := h.entryAt(ca.Tree, p)
			if err != nil {
				return nil, err
			}
			eb, _, err := h.entryAt(cb.Tree, p)
			if err != nil {
				return nil, err
			}
			if (ea == nil || ea.Kind == kindDir) && (eb == nil || eb.Kind == kindDir) {
				continue // a directory: its files are listed themselves
			}
			fd, err := h.fileDiff(p, g.status, ea, eb, limit)
			if err != nil {
				return nil, err
			}
			out = append(out, fd)
		}
	}
	return out, nil
}

// entryAt finds the entry at path p (slash-separated) under tree root; nil if none.
func (h *History) entryAt(root, p string) (*entry, bool, error) {
	parts := strings.Split(p, "/")
	tree := root
	for i, name := range parts {
		es, err := h.tree(tree)
		if err != nil {
			return nil, false, err
		}
		var found *entry
		for j := range es {
			if es[j].Name == name {
				found = &es[j]
				break
			}
		}
		if found == nil {
			return nil, false, nil
		}
		if i == len(parts)-1 {
			return found, true, nil
		}
		if found.Kind != kindDir {
			return nil, false, nil
		}
		tree = found.Hash
	}
	return nil, false, nil
}

func (h *History) fileDiff(p, status string, ea, eb *entry, limit int) (FileDiff, error) {
	fd := FileDiff{Path: p, Status: status}
	side := func(e *entry) ([]byte, string, error) {
		switch {
		case e == nil || e.Kind == kindDir:
			return nil, "", nil
		case e.Kind != kindFile:
			return nil, fmt.Sprintf("not a regular file (%s)", e.Kind), nil
		case e.Size > maxDiffInput:
			return nil, fmt.Sprintf("too large to diff (%d bytes; the limit is %d)", e.Size, maxDiffInput), nil
		}
		if e.Hash == "" {
			return []byte{}, "", nil
		}
		data, err := h.blobs.read(e.Hash)
		return data, "", err
	}
	da, na, err := side(ea)
	if err != nil {
		return fd, err
	}
	db, nb, err := side(eb)
	if err != nil {
		return fd, err
	}
	if fd.Note = na + nb; na != "" && nb != "" {
		fd.Note = na + "; " + nb
	}
	if fd.Note != "" {
		return fd, nil
	}
	if isBinary(da) || isBinary(db) {
		fd.Binary = true
		return fd, nil
	}
	from, to := "a/"+p, "b/"+p
	if ea == nil || ea.Kind == kindDir {
		from = "/dev/null"
	}
	if eb == nil || eb.Kind == kindDir {
		to = "/dev/null"
	}
	u, ok := unified(from, to, splitLines(da), splitLines(db))
	if !ok {
		fd.Note = "too many changed lines to diff"
		return fd, nil
	}
	if limit > 0 && len(u) > limit {
		cut := strings.LastIndexByte(u[:limit], '\n') + 1
		u, fd.Truncated = u[:cut], true
	}
	fd.Unified = u
	return fd, nil
}

// isBinary says whether data is not text: a NUL in its first 8000 bytes (as git decides),
// or not UTF-8.
func isBinary(data []byte) bool {
	return bytes.IndexByte(data[:min(len(data), 8000)], 0) >= 0 || !utf8.Valid(data)
}

// splitLines splits data into lines, each with its newline (the last may have none).
func splitLines(data []byte) []string {
	var lines []string
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n') + 1
		if i == 0 {
			i = len(data)
		}
		lines = append(lines, string(data[:i]))
		data = data[i:]
	}
	return lines
}

// op is one line of an edit script: ' ' kept, '-' removed from a, '+' added in b.
type op struct {
	kind byte
	line string
}

// edits is the shortest edit script from a to b (a longest common subsequence), or false
// when the lines between the common prefix and suffix are too many to compare.
func edits(a, b []string) ([]op, bool) {
	pre := 0
	for pre < len(a) && pre < len(b) && a[pre] == b[pre] {
		pre++
	}
	suf := 0
	for suf < len(a)-pre && suf < len(b)-pre && a[len(a)-1-suf] == b[len(b)-1-suf] {
		suf++
	}
	ma, mb := a[pre:len(a)-suf], b[pre:len(b)-suf]
	if (len(ma)+1)*(len(mb)+1) > maxDiffCells {
		return nil, false
	}
	// lcs[i][j]: the longest common subsequence of ma[i:] and mb[j:].
	w := len(mb) + 1
	lcs := make([]int32, (len(ma)+1)*w)
	for i := len(ma) - 1; i >= 0; i-- {
		for j := len(mb) - 1; j >= 0; j-- {
			if ma[i] == mb[j] {
				lcs[i*w+j] = lcs[(i+1)*w+j+1] + 1
			} else {
				lcs[i*w+j] = max(lcs[(i+1)*w+j], lcs[i*w+j+1])
			}
		}
	}
	ops := make([]op, 0, len(a)+len(b))
	for _, l := range a[:pre] {
		ops = append(ops, op{' ', l})
	}
	i, j := 0, 0
	for i < len(ma) || j < len(mb) {
		switch {
		case i < len(ma) && j < len(mb) && ma[i] == mb[j]:
			ops = append(ops, op{' ', ma[i]})
			i, j = i+1, j+1
		case i < len(ma) && (j == len(mb) || lcs[(i+1)*w+j] >= lcs[i*w+j+1]):
			ops = append(ops, op{'-', ma[i]})
			i++
		default:
			ops = append(ops, op{'+', mb[j]})
			j++
		}
	}
	for _, l := range a[len(a)-suf:] {
		ops = append(ops, op{' ', l})
	}
	return ops, true
}

// unified writes the edit script from a to b as a unified diff with three lines of context.
func unified(from, to string, a, b []string) (string, bool) {
	ops, ok := edits(a, b)
	if !ok {
		return "", false
	}
	const context = 3
	var sb strings.Builder
	fmt.Fprintf(&sb, "--- %s\n+++ %s\n", from, to)
	// ai, bi: the line numbers (from 0) in a and b where each op starts.
	ai, bi := make([]int, len(ops)+1), make([]int, len(ops)+1)
	for k, o := range ops {
		ai[k+1], bi[k+1] = ai[k], bi[k]
		if o.kind != '+' {
			ai[k+1]++
		}
		if o.kind != '-' {
			bi[k+1]++
		}
	}
	for k := 0; k < len(ops); {
		if ops[k].kind == ' ' {
			k++
			continue
		}
		// A hunk: from context lines before this change to context lines after the last
		// change that is no more than 2*context kept lines further on.
		start := max(0, k-context)
		end := k
		for kept := 0; end < len(ops) && kept <= 2*context; end++ {
			if ops[end].kind == ' ' {
				kept++
			} else {
				kept = 0
			}
		}
		// Trim the kept lines past context after the last change.
		last := end - 1
		for last > k && ops[last].kind == ' ' {
			last--
		}
		end = min(len(ops), last+1+context)
		na, nb := ai[end]-ai[start], bi[end]-bi[start]
		fmt.Fprintf(&sb, "@@ -%s +%s @@\n", hunkRange(ai[start], na), hunkRange(bi[start], nb))
		for _, o := range ops[start:end] {
			sb.WriteByte(o.kind)
			sb.WriteString(o.line)
			if !strings.HasSuffix(o.line, "\n") {
				sb.WriteString("\n\\ No newline at end of file\n")
			}
		}
		k = end
	}
	return sb.String(), true
}

// hunkRange is a hunk header's "start,count" (1-based; an empty range names the line
// before it).
func hunkRange(start, n int) string {
	if n == 0 {
		return fmt.Sprintf("%d,0", start)
	}
	if n == 1 {
		return fmt.Sprintf("%d", start+1)
	}
	return fmt.Sprintf("%d,%d", start+1, n)
}
