package egress

import (
	"errors"
	"fmt"
	"io"
)

// TLS constants this file needs (RFC 8446, RFC 6066).
const (
	recordHandshake   = 22
	recordAlert       = 21
	typeClientHello   = 1
	extServerName     = 0
	serverNameHost    = 0
	recordHeaderLen   = 5
	maxRecordLen      = 1 << 14 // a plaintext record's limit
	maxHelloLen       = 1 << 16 // generous: a ClientHello with post-quantum key shares is ~2KiB
	alertAccessDenied = 49
)

// errNotTLS is the answer when a tunnel's first bytes are not a TLS handshake record.
var errNotTLS = errors.New("the tunnel did not start with a TLS ClientHello")

// clientHello is what the proxy reads from a ClientHello: only the server name.
type clientHello struct {
	// serverName is the host_name of the server_name extension; "" when there is none.
	serverName string
}

// readClientHello reads from r the TLS records that carry the first handshake message and
// parses that as a ClientHello. raw is every byte read (also on error), to be forwarded
// upstream unchanged when the hello is accepted. It never reads more than maxHelloLen
// bytes, and it refuses whatever it cannot parse exactly: a record of another
// type or version inside the hello, a record over 16KiB, a handshake message that is not
// a ClientHello, bytes after it in its last record.
func readClientHello(r io.Reader) (raw []byte, h clientHello, err error) {
	var msg []byte
	for {
		var hdr [recordHeaderLen]byte
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return raw, h, fmt.Errorf("reading the ClientHello: %w", err)
		}
		raw = append(raw, hdr[:]...)
		if hdr[0] != recordHandshake || hdr[1] != 3 {
			if len(raw) == recordHeaderLen {
				return raw, h, errNotTLS
			}
			return raw, h, errors.New("a record that is not a handshake record in the middle of the ClientHello")
		}
		n := int(hdr[3])<<8 | int(hdr[4])
		if n == 0 || n > maxRecordLen {
			return raw, h, fmt.Errorf("a TLS record of %d bytes", n)
		}
		if len(raw)+n > maxHelloLen {
			// Records and all: a hello cut into tiny records costs no more than a big one.
			return raw, h, fmt.Errorf("a ClientHello over %d bytes", maxHelloLen)
		}
		start := len(raw)
		raw = append(raw, make([]byte, n)...)
		if _, err := io.ReadFull(r, raw[start:]); err != nil {
			return raw[:start], h, fmt.Errorf("reading the ClientHello: %w", err)
		}
		msg = append(msg, raw[start:]...)
		if len(msg) < 4 {
			continue
		}
		if msg[0] != typeClientHello {
			return raw, h, fmt.Errorf("the first handshake message is of type %d, not a ClientHello", msg[0])
		}
		size := int(msg[1])<<16 | int(msg[2])<<8 | int(msg[3])
		if size > maxHelloLen {
			return raw, h, fmt.Errorf("a ClientHello of %d bytes, over %d", size, maxHelloLen)
		}
		if len(msg) < 4+size {
			continue
		}
		if len(msg) > 4+size {
			return raw, h, errors.New("bytes after the ClientHello in its record")
		}
		h, err = parseClientHello(msg[4:])
		return raw, h, err
	}
}

// tlsReader reads TLS's length-prefixed structures. A read past the end yields zeros and
// marks the reader failed, so a parse reads straight through and checks ok once.
type tlsReader struct {
	b  []byte
	ok bool
}

func (r *tlsReader) take(n int) []byte {
	if !r.ok || n > len(r.b) {
		r.ok, r.b = false, nil
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *tlsReader) u8() int {
	if v := r.take(1); v != nil {
		return int(v[0])
	}
	return 0
}

func (r *tlsReader) u16() int {
	if v := r.take(2); v != nil {
		return int(v[0])<<8 | int(v[1])
	}
	return 0
}

// vec8 and vec16 read a vector with a one- or two-byte length.
func (r *tlsReader) vec8() tlsReader  { return tlsReader{b: r.take(r.u8()), ok: r.ok} }
func (r *tlsReader) vec16() tlsReader { return tlsReader{b: r.take(r.u16()), ok: r.ok} }

var errMalformedHello = errors.New("a malformed ClientHello")

// parseClientHello parses a ClientHello's body (RFC 8446 §4.1.2; TLS 1.0–1.2 hellos have
// the same layout) far enough to find the server name, checking every length on the way.
func parseClientHello(body []byte) (clientHello, error) {
	r := tlsReader{b: body, ok: true}
	r.take(2)  // legacy_version
	r.take(32) // random
	sid, suites, comp := r.vec8(), r.vec16(), r.vec8()
	if !r.ok || len(sid.b) > 32 || len(suites.b) < 2 || len(suites.b)%2 != 0 || len(comp.b) < 1 {
		return clientHello{}, errMalformedHello
	}
	if len(r.b) == 0 {
		return clientHello{}, nil // no extensions, so no server name
	}
	exts := r.vec16()
	if !r.ok || len(r.b) != 0 {
		return clientHello{}, errMalformedHello
	}
	var h clientHello
	seen := map[int]bool{}
	for len(exts.b) > 0 {
		typ, data := exts.u16(), exts.vec16()
		if !exts.ok {
			return clientHello{}, errMalformedHello
		}
		if seen[typ] {
			return clientHello{}, fmt.Errorf("a ClientHello with two extensions of type %d", typ)
		}
		seen[typ] = true
		if typ != extServerName {
			continue
		}
		name, err := parseServerName(data.b)
		if err != nil {
			return clientHello{}, err
		}
		h.serverName = name
	}
	return h, nil
}

// parseServerName parses the server_name extension (RFC 6066 §3): one host_name, not
// empty. Anything a server could read as another name (two of them, an unknown name
// type) is refused rather than guessed at.
func parseServerName(data []byte) (string, error) {
	r := tlsReader{b: data, ok: true}
	list := r.vec16()
	if !r.ok || len(r.b) != 0 || len(list.b) == 0 {
		return "", errMalformedHello
	}
	name := ""
	for len(list.b) > 0 {
		typ, n := list.u8(), list.vec16()
		switch {
		case !list.ok:
			return "", errMalformedHello
		case typ != serverNameHost:
			return "", fmt.Errorf("a server name of unknown type %d", typ)
		case name != "":
			return "", errors.New("a ClientHello with two server names")
		case len(n.b) == 0:
			return "", errors.New("an empty server name")
		}
		name = string(n.b)
	}
	return name, nil
}

// accessDenied is a fatal TLS alert, access_denied, as a plaintext record: what the
// client is told when its ClientHello is refused.
var accessDenied = []byte{recordAlert, 3, 3, 0, 2, 2, alertAccessDenied}
