package history

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// The stat cache is rewritten on every scan, so it is a flat binary file, much cheaper to
// encode than JSON: a magic, then per entry: path length (uvarint), path,
// size, mtime, ctime, inode, dev, mode (uvarint each, zigzag for the signed ones), and the
// 32-byte SHA-256.
const statMagic = "paddock-statcache-1\n"

func encodeStatCache(m map[string]statEntry) []byte {
	buf := make([]byte, 0, len(statMagic)+len(m)*96)
	buf = append(buf, statMagic...)
	var sum [32]byte
	for p, e := range m {
		buf = binary.AppendUvarint(buf, uint64(len(p)))
		buf = append(buf, p...)
		buf = binary.AppendVarint(buf, e.Key.Size)
		buf = binary.AppendVarint(buf, e.Key.Mtime)
		buf = binary.AppendVarint(buf, e.Key.Ctime)
		buf = binary.AppendUvarint(buf, e.Key.Ino)
		buf = binary.AppendUvarint(buf, e.Key.Dev)
		buf = binary.AppendUvarint(buf, uint64(e.Key.Mode))
		_, _ = hex.Decode(sum[:], []byte(e.Hash)) // this package wrote Hash: 64 hex digits
		buf = append(buf, sum[:]...)
	}
	return buf
}

var errBadCache = fmt.Errorf("stat cache is corrupt: %w", errdefs.ErrDataLoss)

func decodeStatCache(b []byte) (map[string]statEntry, error) {
	if len(b) < len(statMagic) || string(b[:len(statMagic)]) != statMagic {
		return nil, errBadCache
	}
	b = b[len(statMagic):]
	m := map[string]statEntry{}
	uv := func() uint64 {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			b = nil
			return 0
		}
		b = b[n:]
		return v
	}
	sv := func() int64 {
		v, n := binary.Varint(b)
		if n <= 0 {
			b = nil
			return 0
		}
		b = b[n:]
		return v
	}
	for len(b) > 0 {
		l := uv()
		if uint64(len(b)) < l {
			return nil, errBadCache
		}
		p := string(b[:l])
		b = b[l:]
		var e statEntry
		e.Key.Size, e.Key.Mtime, e.Key.Ctime = sv(), sv(), sv()
		e.Key.Ino, e.Key.Dev, e.Key.Mode = uv(), uv(), fs.FileMode(uv())
		if len(b) < 32 {
			return nil, errBadCache
		}
		e.Hash = hex.EncodeToString(b[:32])
		b = b[32:]
		m[p] = e
	}
	return m, nil
}

// loadStatCache reads the cache; a missing or corrupt one is empty (it is only a cache:
// the next scan re-hashes everything and rebuilds it).
func loadStatCache(path string) map[string]statEntry {
	b, err := os.ReadFile(path)
	if err != nil {
		return map[string]statEntry{}
	}
	m, err := decodeStatCache(b)
	if err != nil || errors.Is(err, fs.ErrNotExist) {
		return map[string]statEntry{}
	}
	return m
}
