package auth

import (
	"bytes"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
)

// FuzzParsePHC: the hash parser never panics, and whatever it accepts is within
// bounds and formats back to the same canonical string.
func FuzzParsePHC(f *testing.F) {
	f.Add(HashPassword("seed password", cheap))
	f.Add(HashPassword("seed password", Params{Memory: 256, Time: 3, Threads: 4, SaltLen: 8, KeyLen: 64}))
	f.Add("$argon2id$v=19$m=65536,t=3,p=4$c29tZXNhbHQ$RdescudvJCsgt3ub+b+dWRWJTmaaJObG")
	f.Add("$argon2id$v=19$m=,t=1,p=1$$")
	f.Add("$$$$$")
	f.Fuzz(func(t *testing.T, s string) {
		h, err := parsePHC(s)
		if err != nil {
			return
		}
		p := h.params
		if p.Memory > maxMemory || p.Memory < 8*uint32(p.Threads) || p.Time < 1 || p.Time > maxTime || p.Threads < 1 ||
			len(h.salt) < minSaltLen || len(h.salt) > maxSaltLen || len(h.key) < minKeyLen || len(h.key) > maxKeyLen {
			t.Fatalf("accepted out-of-bounds hash %q: %+v", s, p)
		}
		canon := fmt.Sprintf("$argon2id$v=19$m=%d,t=%d,p=%d$%s$%s", p.Memory, p.Time, p.Threads, b64.EncodeToString(h.salt), b64.EncodeToString(h.key))
		if canon != s {
			t.Fatalf("accepted non-canonical %q (canonical %q)", s, canon)
		}
	})
}

// FuzzParseSessionID: accepted IDs are exactly 32 bytes of base64url.
func FuzzParseSessionID(f *testing.F) {
	f.Add(string(newSessionID()))
	f.Add(strings.Repeat("A", 43))
	f.Add(strings.Repeat("_", 42) + "=")
	f.Fuzz(func(t *testing.T, s string) {
		id, err := ParseSessionID(s)
		if err != nil {
			return
		}
		if string(id) != s || len(s) != 43 || strings.ContainsAny(s, "+/=") {
			t.Fatalf("accepted %q", s)
		}
	})
}

// FuzzParseBearer: the Authorization parser never panics and accepts only
// well-formed pdk_ tokens.
func FuzzParseBearer(f *testing.F) {
	f.Add("Bearer pdk_" + strings.Repeat("A", 43))
	f.Add("bearer  pdk_" + strings.Repeat("-", 43))
	f.Add("Basic abc")
	f.Add("Bearer")
	f.Fuzz(func(t *testing.T, h string) {
		tok, err := parseBearer(h)
		if err != nil {
			return
		}
		if _, err := ParseToken(string(tok)); err != nil || !strings.HasPrefix(string(tok), TokenPrefix) || len(tok) != tokenLen {
			t.Fatalf("accepted %q as %q", h, tok.Reveal())
		}
	})
}

// FuzzParseRecoveryCode: normalization is idempotent and accepted codes use only
// the code alphabet.
func FuzzParseRecoveryCode(f *testing.F) {
	codes, _ := newRecoveryCodes()
	f.Add(codes[0].Reveal())
	f.Add(strings.ToUpper(codes[1].Reveal()))
	f.Add("oooo iiii llll 0000 1111 2222")
	f.Add("ı̇İK")
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseRecoveryCode(s)
		if err != nil {
			return
		}
		if len(c) != recoveryLen {
			t.Fatalf("accepted %q as %q (%d chars)", s, c.Reveal(), len(c))
		}
		for i := 0; i < len(c); i++ {
			if !strings.Contains(recoveryAlphabet, string(c[i])) {
				t.Fatalf("accepted %q as %q", s, c.Reveal())
			}
		}
		if again, err := ParseRecoveryCode(string(c)); err != nil || again != c {
			t.Fatalf("not idempotent: %q -> %q -> %q, %v", s, c.Reveal(), again.Reveal(), err)
		}
	})
}

// FuzzParseCSRFToken: the token parser never panics, and only the token of the
// right session's secret is accepted.
func FuzzParseCSRFToken(f *testing.F) {
	sess := &Session{ID: newSessionID()}
	f.Add(CSRFToken(sess))
	f.Add(strings.Repeat("A", 86))
	f.Add("")
	f.Fuzz(func(t *testing.T, tok string) {
		got, err := parseCSRFToken(tok)
		if err != nil {
			return
		}
		raw, derr := base64.RawURLEncoding.Strict().DecodeString(tok)
		if derr != nil || len(got) != csrfLen || len(raw) != 2*csrfLen {
			t.Fatalf("accepted %q", tok)
		}
		// Unmasking must be the inverse of masking.
		remasked := make([]byte, csrfLen)
		subtle.XORBytes(remasked, raw[:csrfLen], got)
		if !bytes.Equal(remasked, raw[csrfLen:]) {
			t.Fatalf("unmasking %q is not XOR with the pad", tok)
		}
	})
}
