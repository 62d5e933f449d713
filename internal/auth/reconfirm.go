package auth

import (
	"context"

	"github.com/paddockhq/paddock/internal/store"
)

// RenewRecoveryCodes replaces sess's user's recovery codes after checking the current
// password, and returns the new codes to be shown once. The password is asked for
// because the codes reset it: a stolen session must not be able to mint a way back
// in. A wrong password is [ErrInvalidCredentials] and counts against the sign-in
// limits, as in [Service.ChangePassword].
func (s *Service) RenewRecoveryCodes(ctx context.Context, sess *Session, current Password, c Client) ([]RecoveryCode, error) {
	att, err := s.reserve(ctx, s.limitKeys(sess.User.Username, c), "")
	if err != nil {
		return nil, s.limited(ctx, "auth.recovery_codes.limited", sess.User.Username, c, err)
	}
	u, err := s.st.UserByID(ctx, sess.User.ID)
	if err != nil {
		return nil, err
	}
	ok, err := s.verify(ctx, u.PasswordHash, current)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, s.failed(ctx, s.audit(u.ID, "auth.recovery_codes.failure", u.ID, map[string]any{"ip": c.Addr.String()}))
	}
	codes, hashes := newRecoveryCodes()
	err = s.st.Update(ctx, func(tx *store.Tx) error {
		if err := tx.ReplaceRecoveryCodes(ctx, u.ID, hashes); err != nil {
			return err
		}
		if err := att.succeeded(ctx, tx); err != nil {
			return err
		}
		return tx.AppendAudit(ctx, s.audit(u.ID, "auth.recovery_codes.regenerate", u.ID, map[string]any{"ip": c.Addr.String()}))
	})
	if err != nil {
		return nil, err
	}
	return codes, nil
}
