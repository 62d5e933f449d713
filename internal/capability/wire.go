package capability

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"strings"
)

// prefix starts every token: "pdk" and the wire format's version.
const prefix = "pdk1."

// IsToken says whether s is shaped as a capability token of any format version ("pdk"
// and a digit), as opposed to an API token ("pdk_…"): for a caller that takes both as
// bearer credentials to route s to the right verifier, which then says what is wrong
// with it.
func IsToken(s string) bool { return len(s) > 3 && s[:3] == "pdk" && s[3] >= '0' && s[3] <= '9' }

const (
	formatVersion = 1 // the first byte of the claims record
	caveatKind    = 1 // the first byte of a caveat record: a first-party restriction
	idSize        = 16
	sigSize       = sha256.Size
)

// The presence byte of a scope says which fields follow, in this order.
const (
	hasResource = 1 << iota
	hasActions
	hasMaxSize
	hasExtensions
	hasNotBefore
	hasExpiry
	hasAll = 1<<iota - 1
)

// token is a token's decoded form.
type token struct {
	audience Audience
	keyID    uint32
	id       [idSize]byte
	subject  string
	scopes   []scope // the minted claims, then each caveat in order
	sig      [sigSize]byte
	// payloads are the bytes each link of the signature chain covers: the claims record,
	// then each caveat record, without their length prefixes.
	payloads [][]byte
}

func (t *token) idString() string { return hex.EncodeToString(t.id[:]) }

func (t *token) claimsPayload(b []byte) []byte {
	b = append(b, formatVersion, byte(t.audience))
	b = binary.BigEndian.AppendUint32(b, t.keyID)
	b = append(b, t.id[:]...)
	b = appendString(b, t.subject)
	return t.scopes[0].appendTo(b)
}

func caveatPayload(b []byte, s *scope) []byte {
	return s.appendTo(append(b, caveatKind))
}

func (s *scope) appendTo(b []byte) []byte {
	var has byte
	for bit, set := range []bool{s.res.kind != 0, s.actions != 0, s.maxSize != 0, len(s.exts) > 0, s.notBefore != 0, s.expiry != 0} {
		if set {
			has |= 1 << bit
		}
	}
	b = append(b, has)
	if has&hasResource != 0 {
		b = appendString(b, s.res.String())
	}
	if has&hasActions != 0 {
		b = append(b, byte(s.actions))
	}
	if has&hasMaxSize != 0 {
		b = binary.BigEndian.AppendUint64(b, uint64(s.maxSize))
	}
	if has&hasExtensions != 0 {
		b = append(b, byte(len(s.exts)))
		for _, e := range s.exts {
			b = append(append(b, byte(len(e))), e...)
		}
	}
	if has&hasNotBefore != 0 {
		b = binary.BigEndian.AppendUint64(b, uint64(s.notBefore))
	}
	if has&hasExpiry != 0 {
		b = binary.BigEndian.AppendUint64(b, uint64(s.expiry))
	}
	return b
}

func appendString(b []byte, s string) []byte {
	return append(binary.BigEndian.AppendUint16(b, uint16(len(s))), s...)
}

// encode writes t from its fields (not its payloads): decode compares the result with
// what it read, so that a token has one encoding and the signature covers exactly what
// was decoded.
func (t *token) encode() string {
	body := make([]byte, 0, 512)
	for i := range t.scopes {
		at := len(body)
		body = append(body, 0, 0)
		if i == 0 {
			body = t.claimsPayload(body)
		} else {
			body = caveatPayload(body, &t.scopes[i])
		}
		binary.BigEndian.PutUint16(body[at:], uint16(len(body)-at-2))
	}
	body = append(body, t.sig[:]...)
	return prefix + base64.RawURLEncoding.EncodeToString(body)
}

// decode reads a token's structure. It checks the form, never the signature: what it
// returns is what the token claims, not yet what anyone granted.
func decode(s string) (*token, error) {
	if len(s) > MaxTokenLen {
		return nil, malformed("%d bytes long, over %d", len(s), MaxTokenLen)
	}
	rest, ok := strings.CutPrefix(s, prefix)
	if !ok {
		if v, _, dot := strings.Cut(s, "."); dot && strings.HasPrefix(v, "pdk") && len(v) < 8 {
			return nil, malformed("format %s is not supported (this verifier reads pdk1)", quote(v))
		}
		return nil, malformed("not a paddock capability token (want the prefix %s)", prefix)
	}
	body, err := base64.RawURLEncoding.Strict().DecodeString(rest)
	if err != nil {
		return nil, malformed("not base64url without padding: %v", err)
	}
	if len(body) < sigSize {
		return nil, malformed("%d bytes, too short for a signature", len(body))
	}
	t := &token{}
	copy(t.sig[:], body[len(body)-sigSize:])
	records := body[:len(body)-sigSize]
	for i := 0; len(records) > 0; i++ {
		if i > MaxCaveats {
			return nil, malformed("more than %d caveats", MaxCaveats)
		}
		if len(records) < 2 || int(binary.BigEndian.Uint16(records)) > len(records)-2 {
			return nil, malformed("record %d is truncated", i)
		}
		n := int(binary.BigEndian.Uint16(records))
		p := records[2 : 2+n]
		records = records[2+n:]
		if i == 0 {
			err = t.readClaims(p)
		} else {
			err = t.readCaveat(i, p)
		}
		if err != nil {
			return nil, err
		}
		t.payloads = append(t.payloads, p)
	}
	if len(t.scopes) == 0 {
		return nil, malformed("no claims")
	}
	if t.encode() != s {
		return nil, malformed("not in canonical form")
	}
	return t, nil
}

func (t *token) readClaims(p []byte) error {
	r := reader{b: p}
	if v := r.u8(); v != formatVersion && !r.short {
		return malformed("claims: format version %d is not supported (this verifier reads %d)", v, formatVersion)
	}
	t.audience = Audience(r.u8())
	t.keyID = r.u32()
	copy(t.id[:], r.next(idSize))
	t.subject = string(r.next(int(r.u16())))
	s, err := r.scope()
	switch {
	case r.short:
		return malformed("claims are truncated")
	case err != nil:
		return malformed("claims: %v", err)
	case len(r.b) > 0:
		return malformed("claims: %d bytes after the end", len(r.b))
	case t.audience != ControlPlane && t.audience != Agent:
		return malformed("claims: unknown audience %d", uint8(t.audience))
	case t.keyID == 0:
		return malformed("claims: key ID 0")
	}
	if err := checkSubject(t.subject); err != nil {
		return malformed("claims: %v", err)
	}
	if err := s.check(true); err != nil {
		return malformed("claims: %v", err)
	}
	t.scopes = append(t.scopes, s)
	return nil
}

func (t *token) readCaveat(i int, p []byte) error {
	r := reader{b: p}
	if k := r.u8(); k != caveatKind && !r.short {
		return malformed("caveat %d: kind %d is not supported (this verifier reads %d)", i, k, caveatKind)
	}
	s, err := r.scope()
	switch {
	case r.short:
		return malformed("caveat %d is truncated", i)
	case err != nil:
		return malformed("caveat %d: %v", i, err)
	case len(r.b) > 0:
		return malformed("caveat %d: %d bytes after the end", i, len(r.b))
	}
	if err := s.check(false); err != nil {
		return malformed("caveat %d: %v", i, err)
	}
	t.scopes = append(t.scopes, s)
	return nil
}

// reader reads big-endian fields; past the end it returns zeros and sets short.
type reader struct {
	b     []byte
	short bool
}

func (r *reader) next(n int) []byte {
	if n > len(r.b) {
		r.short, r.b = true, nil
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) u8() byte {
	if v := r.next(1); v != nil {
		return v[0]
	}
	return 0
}

func (r *reader) u16() uint16 {
	if v := r.next(2); v != nil {
		return binary.BigEndian.Uint16(v)
	}
	return 0
}

func (r *reader) u32() uint32 {
	if v := r.next(4); v != nil {
		return binary.BigEndian.Uint32(v)
	}
	return 0
}

func (r *reader) u64() uint64 {
	if v := r.next(8); v != nil {
		return binary.BigEndian.Uint64(v)
	}
	return 0
}

// scope reads a scope's fields; check validates them together. A field that is present
// with its zero value is left as not set: encode then leaves it out, and decode refuses
// the token as not canonical.
func (r *reader) scope() (scope, error) {
	var s scope
	has := r.u8()
	if has&^hasAll != 0 {
		return s, fmt.Errorf("unknown fields %#x", has&^hasAll)
	}
	if has&hasResource != 0 {
		res := r.next(int(r.u16()))
		if r.short {
			return s, nil
		}
		var err error
		if s.res, err = parseResource(string(res), true); err != nil {
			return s, fmt.Errorf("resource %v", err)
		}
	}
	if has&hasActions != 0 {
		s.actions = actionSet(r.u8())
	}
	if has&hasMaxSize != 0 {
		v := r.u64()
		if v > math.MaxInt64 {
			return s, fmt.Errorf("max_size %d is over 2^63-1", v)
		}
		s.maxSize = int64(v)
	}
	if has&hasExtensions != 0 {
		n := int(r.u8())
		for range n {
			s.exts = append(s.exts, string(r.next(int(r.u8()))))
		}
	}
	if has&hasNotBefore != 0 {
		s.notBefore = int64(r.u64())
	}
	if has&hasExpiry != 0 {
		s.expiry = int64(r.u64())
	}
	return s, nil
}

// sign computes the signature chain over payloads: the first link keyed with the
// token's signing key, each next link with the signature so far.
func sign(key []byte, payloads [][]byte) [sigSize]byte {
	sig := mac(key, payloads[0])
	for _, p := range payloads[1:] {
		sig = mac(sig[:], p)
	}
	return sig
}

func mac(key, msg []byte) [sigSize]byte {
	var out [sigSize]byte
	h := hmac.New(sha256.New, key)
	h.Write(msg)
	h.Sum(out[:0])
	return out
}
