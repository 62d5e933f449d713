package auth

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"net/http"
)

// CSRF protection for requests authenticated by the session cookie (bearer-token
// requests carry no ambient credential and need none):
//
//   - The per-session CSRF secret is HMAC-SHA256(session ID, "paddock csrf v1"). Only
//     the cookie holder can compute it, it dies with the session, and it is not stored.
//   - Pages embed CSRFToken(session), which masks the secret with a fresh one-time
//     pad on every call (pad || pad XOR secret), so a compressed HTTPS response never
//     repeats it byte for byte (BREACH).
//   - CheckCSRF accepts a state-changing request only with that token in the
//     X-CSRF-Token header or the csrf_token form field, and only if the browser's
//     Sec-Fetch-Site / Origin say it came from this origin.

// CSRF field and header names.
const (
	CSRFFormField = "csrf_token"
	CSRFHeader    = "X-CSRF-Token"
)

const csrfLen = sha256.Size

// csrfSecret is the session's CSRF secret.
func csrfSecret(id SessionID) []byte {
	m := hmac.New(sha256.New, []byte(id))
	m.Write([]byte("paddock csrf v1"))
	return m.Sum(nil)
}

// CSRFToken returns a CSRF token for sess, to embed in forms or hand to scripts.
// Every call returns a different string; all of them are valid for sess.
func CSRFToken(sess *Session) string {
	secret := csrfSecret(sess.ID)
	out := make([]byte, 2*csrfLen)
	_, _ = rand.Read(out[:csrfLen])
	subtle.XORBytes(out[csrfLen:], out[:csrfLen], secret)
	return base64.RawURLEncoding.EncodeToString(out)
}

// parseCSRFToken unmasks a token into the secret it carries.
func parseCSRFToken(tok string) ([]byte, error) {
	if len(tok) != base64.RawURLEncoding.EncodedLen(2*csrfLen) {
		return nil, fmt.Errorf("CSRF token: wrong length: %w", ErrCSRF)
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(tok)
	if err != nil || len(b) != 2*csrfLen {
		return nil, fmt.Errorf("CSRF token: not base64url: %w", ErrCSRF)
	}
	secret := make([]byte, csrfLen)
	subtle.XORBytes(secret, b[:csrfLen], b[csrfLen:])
	return secret, nil
}

// CheckCSRF returns nil for safe methods (GET, HEAD, OPTIONS, TRACE) and otherwise
// requires that r passes the origin check ([Service.CheckOrigin]) and carries a
// CSRF token of sess; anything else is [ErrCSRF]. It reads the form field only
// from the body (r.PostFormValue), never the URL, which ends up in logs; the caller
// bounds the body size.
func (s *Service) CheckCSRF(r *http.Request, sess *Session) error {
	if isSafeMethod(r.Method) {
		return nil
	}
	if err := s.CheckOrigin(r); err != nil {
		return err
	}
	tok := r.Header.Get(CSRFHeader)
	if tok == "" {
		tok = r.PostFormValue(CSRFFormField)
	}
	got, err := parseCSRFToken(tok)
	if err != nil {
		return err
	}
	if !hmac.Equal(got, csrfSecret(sess.ID)) {
		return fmt.Errorf("CSRF token does not belong to this session: %w", ErrCSRF)
	}
	return nil
}

// CheckOrigin rejects a state-changing request that a browser says came from
// another origin, using [http.CrossOriginProtection] (Sec-Fetch-Site, then Origin
// against Host), with the origins of [WithTrustedOrigins] allowed. Requests with
// neither header (non-browser clients) pass. Use it alone for forms that have no
// session yet (login, register, recovery: login CSRF).
func (s *Service) CheckOrigin(r *http.Request) error {
	if err := s.cop().Check(r); err != nil {
		return fmt.Errorf("%v: %w", err, ErrCSRF)
	}
	return nil
}

func (s *Service) cop() *http.CrossOriginProtection {
	s.copOnce.Do(func() {
		s.copProt = http.NewCrossOriginProtection()
		for o := range s.cfg.trustedOrigins {
			if err := s.copProt.AddTrustedOrigin(o); err != nil {
				s.cfg.log.Error("ignoring malformed trusted origin", "origin", o, "err", err)
			}
		}
	})
	return s.copProt
}

func isSafeMethod(m string) bool {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	return false
}
