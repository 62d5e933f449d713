package auth

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/store"
)

// User is an account as the rest of the control plane sees it (no password hash).
type User struct {
	ID        string
	Username  string
	Role      string // store.RoleUser or store.RoleAdmin
	CreatedAt time.Time
}

// IsAdmin reports whether u has the admin role.
func (u User) IsAdmin() bool { return u.Role == store.RoleAdmin }

// LogValue logs a user by ID and name.
func (u User) LogValue() slog.Value {
	return slog.GroupValue(slog.String("id", u.ID), slog.String("username", u.Username), slog.String("role", u.Role))
}

func userOf(u store.User) User {
	return User{ID: u.ID, Username: u.Username, Role: u.Role, CreatedAt: u.CreatedAt}
}

// RegisterRequest is a new account.
type RegisterRequest struct {
	Username string
	Password Password
	Role     string // empty means store.RoleUser; the caller decides who may create admins
	Client   Client
}

// Registration is a created account and its recovery codes, which are shown to the
// user once and never again.
type Registration struct {
	User          User
	RecoveryCodes []RecoveryCode
}

// Register creates an account with RecoveryCodeCount recovery codes, whatever the
// registration mode (the first admin, an admin's tools); the public page uses
// [Service.SignUp]. Errors: a bad
// username or password ([errdefs.ErrInvalidArgument], saying what is wrong), a
// taken username ([errdefs.ErrAlreadyExists]).
func (s *Service) Register(ctx context.Context, req RegisterRequest) (*Registration, error) {
	return s.register(ctx, req, nil)
}

// register is Register; redeem, when set, runs first in the transaction that makes the
// account (using an invite) and returns what the audit event records of it.
func (s *Service) register(ctx context.Context, req RegisterRequest, redeem func(*store.Tx) (string, error)) (*Registration, error) {
	if err := CheckUsername(req.Username); err != nil {
		return nil, err
	}
	if err := CheckPasswordPolicy(req.Username, req.Password); err != nil {
		return nil, err
	}
	role := req.Role
	if role == "" {
		role = store.RoleUser
	}
	if role != store.RoleUser && role != store.RoleAdmin {
		return nil, fmt.Errorf("role %q: must be %q or %q: %w", role, store.RoleUser, store.RoleAdmin, errdefs.ErrInvalidArgument)
	}
	hash, err := s.hash(ctx, req.Password)
	if err != nil {
		return nil, err
	}
	codes, hashes := newRecoveryCodes()
	var u store.User
	err = s.st.Update(ctx, func(tx *store.Tx) error {
		detail := map[string]any{"role": role, "ip": req.Client.Addr.String()}
		if redeem != nil {
			invite, err := redeem(tx)
			if err != nil {
				return err
			}
			detail["invite_id"] = invite
		}
		var err error
		u, err = tx.CreateUser(ctx, store.User{Username: req.Username, PasswordHash: hash, Role: role, CreatedAt: s.now()}, hashes)
		if err != nil {
			return err
		}
		detail["username"] = u.Username
		return tx.AppendAudit(ctx, s.audit(u.ID, "auth.register", u.ID, detail))
	})
	if errors.Is(err, errdefs.ErrAlreadyExists) {
		return nil, fmt.Errorf("username %q is taken: choose another: %w", req.Username, errdefs.ErrAlreadyExists)
	}
	if err != nil {
		return nil, err
	}
	return &Registration{User: userOf(u), RecoveryCodes: codes}, nil
}

// LoginRequest is a sign-in attempt.
type LoginRequest struct {
	Username string
	Password Password
	Client   Client
}

// Login checks a username and password and starts a session. Every failure that
// depends on the account is [ErrInvalidCredentials]; too many recent failures for
// the account or the address give a [*LimitedError] before anything is checked.
// A correct password hashed with outdated parameters is rehashed.
func (s *Service) Login(ctx context.Context, req LoginRequest) (*Session, error) {
	var sess *Session
	err := s.signIn(ctx, req, "auth.login", func(tx *store.Tx, u store.User) error {
		var err error
		sess, err = s.newSession(ctx, tx, u, req.Client)
		return err
	})
	if err != nil {
		return nil, err
	}
	return sess, nil
}

// LoginToken checks a username and password exactly as [Service.Login] does (same
// limits, same errors) and creates an API token named name instead of a session:
// how the CLI signs in. The token has every scope the user may have and the default
// lifetime. A bad name is [errdefs.ErrInvalidArgument] and is refused
// before the password is checked, so it costs no attempt. The token is returned
// only here; show it once.
func (s *Service) LoginToken(ctx context.Context, req LoginRequest, name string) (Token, store.APIToken, error) {
	name = strings.TrimSpace(name)
	if err := checkTokenName(name); err != nil {
		return "", store.APIToken{}, err
	}
	exp := s.now().Add(min(s.cfg.tokenDefaultTTL, s.cfg.tokenMaxTTL))
	var (
		tok  Token
		info store.APIToken
	)
	err := s.signIn(ctx, req, "auth.token_login", func(tx *store.Tx, u store.User) error {
		var err error
		// What the user may do: the CLI signs in to act as its user.
		tok, info, err = s.createAPIToken(ctx, tx, u.ID, name, UserScopes(userOf(u)), exp)
		return err
	})
	if err != nil {
		return "", store.APIToken{}, err
	}
	return tok, info, nil
}

// signIn is the password check that Login and LoginToken share: it counts the
// attempt against the limits, verifies the password, and on success runs grant in
// the same transaction that un-counts the attempt, rehashes an outdated hash and
// audits action+".success". Failures audit action+".failure" / ".limited".
func (s *Service) signIn(ctx context.Context, req LoginRequest, action string, grant func(*store.Tx, store.User) error) error {
	att, err := s.reserve(ctx, s.limitKeys(req.Username, req.Client), "")
	if err != nil {
		return s.limited(ctx, action+".limited", req.Username, req.Client, err)
	}
	u, err := s.lookup(ctx, req.Username)
	if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		return err
	}
	encoded := u.PasswordHash // empty for an unknown user: verify then burns the same time and fails
	ok, err := s.verify(ctx, encoded, req.Password)
	if err != nil {
		return err
	}
	if !ok {
		return s.failed(ctx, s.audit("", action+".failure", auditName(req.Username),
			map[string]any{"ip": req.Client.Addr.String()}))
	}
	rehash := ""
	if NeedsRehash(encoded, s.cfg.params) {
		if rehash, err = s.hash(ctx, req.Password); err != nil {
			return err
		}
	}
	return s.st.Update(ctx, func(tx *store.Tx) error {
		if rehash != "" {
			if err := tx.SetPasswordHash(ctx, u.ID, rehash); err != nil {
				return err
			}
		}
		if err := att.succeeded(ctx, tx); err != nil {
			return err
		}
		if err := grant(tx, u); err != nil {
			return err
		}
		return tx.AppendAudit(ctx, s.audit(u.ID, action+".success", u.ID,
			map[string]any{"ip": req.Client.Addr.String(), "rehashed": rehash != ""}))
	})
}

// lookup finds a user by a username that may be anything a client sent.
func (s *Service) lookup(ctx context.Context, username string) (store.User, error) {
	if CheckUsername(username) != nil {
		return store.User{}, fmt.Errorf("user: %w", errdefs.ErrNotFound)
	}
	return s.st.UserByUsername(ctx, username)
}

// UserByID returns a user, or [errdefs.ErrNotFound].
func (s *Service) UserByID(ctx context.Context, id string) (User, error) {
	u, err := s.st.UserByID(ctx, id)
	return userOf(u), err
}

// ChangePassword sets a new password for sess's user after checking the current
// one, signs out every other session of the user and revokes all of the user's API
// tokens (whoever knew the old password may have made some). A wrong current password is
// [ErrInvalidCredentials] and counts against the sign-in limits (a stolen session
// must not become a free password oracle); a new password that breaks the policy
// is [errdefs.ErrInvalidArgument].
func (s *Service) ChangePassword(ctx context.Context, sess *Session, current, next Password, c Client) error {
	if err := CheckPasswordPolicy(sess.User.Username, next); err != nil {
		return err
	}
	att, err := s.reserve(ctx, s.limitKeys(sess.User.Username, c), "")
	if err != nil {
		return s.limited(ctx, "auth.password.limited", sess.User.Username, c, err)
	}
	u, err := s.st.UserByID(ctx, sess.User.ID)
	if err != nil {
		return err
	}
	ok, err := s.verify(ctx, u.PasswordHash, current)
	if err != nil {
		return err
	}
	if !ok {
		return s.failed(ctx, s.audit(u.ID, "auth.password.failure", u.ID, map[string]any{"ip": c.Addr.String()}))
	}
	hash, err := s.hash(ctx, next)
	if err != nil {
		return err
	}
	var seq int64
	err = s.st.Update(ctx, func(tx *store.Tx) error {
		if err := tx.SetPasswordHash(ctx, u.ID, hash); err != nil {
			return err
		}
		n, err := tx.DeleteOtherUserSessions(ctx, u.ID, sessionHash(sess.ID))
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
		return tx.AppendAudit(ctx, s.audit(u.ID, "auth.password.change", u.ID,
			map[string]any{"ip": c.Addr.String(), "sessions_revoked": n, "tokens_revoked": toks}))
	})
	s.sessionsEnded(ctx, seq, err)
	return err
}
