package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/store"
)

// RecoveryCodeCount is how many recovery codes an account gets.
const RecoveryCodeCount = 10

// Recovery codes are 24 symbols of Crockford's base32 (120 random bits), shown in
// groups of four: "7x3k-9q2m-...". The alphabet has no i, l, o or u, so what a user
// types back from paper is unambiguous; ParseRecoveryCode forgives case, spaces,
// dashes, and reads i and l as 1 and o as 0.
//
// They are stored as plain SHA-256, not Argon2: a slow hash protects low-entropy
// secrets from offline guessing, and 120 random bits cannot be guessed offline at
// any speed. A fast hash also lets the store look a code up by its digest.
const (
	recoveryAlphabet = "0123456789abcdefghjkmnpqrstvwxyz"
	recoveryLen      = 24
	recoveryGroup    = 4
)

// newRecoveryCodes returns RecoveryCodeCount fresh codes, formatted for display,
// and their digests for the store.
func newRecoveryCodes() ([]RecoveryCode, [][]byte) {
	codes := make([]RecoveryCode, RecoveryCodeCount)
	hashes := make([][]byte, RecoveryCodeCount)
	for i := range codes {
		var raw [recoveryLen]byte
		_, _ = rand.Read(raw[:])
		var b strings.Builder
		for j, r := range raw {
			if j > 0 && j%recoveryGroup == 0 {
				b.WriteByte('-')
			}
			b.WriteByte(recoveryAlphabet[r&31]) // 256 is a multiple of 32: no bias
		}
		codes[i] = RecoveryCode(b.String())
		hashes[i] = recoveryDigest(normalizeRecovery(b.String()))
	}
	return codes, hashes
}

// ParseRecoveryCode normalizes a recovery code as a user typed it, or returns an
// [errdefs.ErrInvalidArgument] error when it cannot be one.
func ParseRecoveryCode(s string) (RecoveryCode, error) {
	if len(s) > 4*recoveryLen {
		return "", fmt.Errorf("recovery code is too long: %w", errdefs.ErrInvalidArgument)
	}
	n := normalizeRecovery(s)
	if len(n) != recoveryLen {
		return "", fmt.Errorf("a recovery code has %d letters and digits: %w", recoveryLen, errdefs.ErrInvalidArgument)
	}
	for i := 0; i < len(n); i++ {
		if strings.IndexByte(recoveryAlphabet, n[i]) < 0 {
			return "", fmt.Errorf("recovery code contains a character that no code has: %w", errdefs.ErrInvalidArgument)
		}
	}
	return RecoveryCode(n), nil
}

// normalizeRecovery drops separators, folds case and maps look-alikes.
func normalizeRecovery(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		switch r {
		case '-', ' ', '\t':
		case 'i', 'l':
			b.WriteByte('1')
		case 'o':
			b.WriteByte('0')
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func recoveryDigest(normalized string) []byte {
	d := sha256.Sum256([]byte(normalized))
	return d[:]
}

// RecoverRequest resets a forgotten password with a recovery code.
type RecoverRequest struct {
	Username    string
	Code        RecoveryCode
	NewPassword Password
	Client      Client
}

// Recover consumes one of the user's recovery codes, sets the new password and
// revokes all of the user's sessions and API tokens, in one transaction. A wrong, used or
// malformed code and an unknown user are all [ErrInvalidCredentials] and count as
// failed sign-in attempts; a new password that breaks the policy is
// [errdefs.ErrInvalidArgument] (saying why) and counts as nothing.
func (s *Service) Recover(ctx context.Context, req RecoverRequest) error {
	if err := CheckPasswordPolicy(req.Username, req.NewPassword); err != nil {
		return err
	}
	att, err := s.reserve(ctx, s.limitKeys(req.Username, req.Client), "")
	if err != nil {
		return s.limited(ctx, "auth.recovery.limited", req.Username, req.Client, err)
	}
	// Hash first, whoever the user is: a known and an unknown username cost the same.
	hash, err := s.hash(ctx, req.NewPassword)
	if err != nil {
		return err
	}
	fail := func() error {
		return s.failed(ctx, s.audit("", "auth.recovery.failure", auditName(req.Username),
			map[string]any{"ip": req.Client.Addr.String()}))
	}
	u, err := s.lookup(ctx, req.Username)
	if errors.Is(err, errdefs.ErrNotFound) {
		return fail()
	} else if err != nil {
		return err
	}
	code, err := ParseRecoveryCode(string(req.Code))
	if err != nil {
		return fail()
	}
	var seq int64
	err = s.st.Update(ctx, func(tx *store.Tx) error {
		if err := tx.RedeemRecoveryCode(ctx, u.ID, recoveryDigest(string(code)), s.now()); err != nil {
			return err
		}
		if err := tx.SetPasswordHash(ctx, u.ID, hash); err != nil {
			return err
		}
		n, err := tx.DeleteUserSessions(ctx, u.ID)
		if err != nil {
			return err
		}
		if seq, err = s.noteSessionsEnded(ctx, tx, u.ID); err != nil {
			return err
		}
		toks, err := tx.RevokeUserAPITokens(ctx, u.ID, s.now())
		if err != nil {
			return err
		}
		if err := att.succeeded(ctx, tx); err != nil {
			return err
		}
		return tx.AppendAudit(ctx, s.audit(u.ID, "auth.recovery.success", u.ID,
			map[string]any{"ip": req.Client.Addr.String(), "sessions_revoked": n, "tokens_revoked": toks}))
	})
	s.sessionsEnded(ctx, seq, err)
	if errors.Is(err, errdefs.ErrNotFound) {
		return fail()
	}
	return err
}

// RegenerateRecoveryCodes replaces all of a user's recovery codes with new ones,
// returned to be shown once.
func (s *Service) RegenerateRecoveryCodes(ctx context.Context, userID string) ([]RecoveryCode, error) {
	codes, hashes := newRecoveryCodes()
	err := s.st.Update(ctx, func(tx *store.Tx) error {
		if err := tx.ReplaceRecoveryCodes(ctx, userID, hashes); err != nil {
			return err
		}
		return tx.AppendAudit(ctx, s.audit(userID, "auth.recovery_codes.regenerate", userID, nil))
	})
	if err != nil {
		return nil, err
	}
	return codes, nil
}
