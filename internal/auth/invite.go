package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/store"
)

// RegistrationMode says who may make an account at /register.
type RegistrationMode string

// The registration modes.
const (
	// RegistrationOpen lets anyone register (rate limited per address).
	RegistrationOpen RegistrationMode = "open"
	// RegistrationInvite needs an invite code an admin made.
	RegistrationInvite RegistrationMode = "invite"
	// RegistrationClosed refuses every registration; admins make accounts otherwise.
	RegistrationClosed RegistrationMode = "closed"
)

// ParseRegistrationMode reads a mode; "" is the default for listen (see
// [DefaultRegistration]).
func ParseRegistrationMode(s, listen string) (RegistrationMode, error) {
	switch m := RegistrationMode(s); m {
	case RegistrationOpen, RegistrationInvite, RegistrationClosed:
		return m, nil
	case "":
		return DefaultRegistration(listen), nil
	}
	return "", fmt.Errorf("registration: %q: want open, invite or closed: %w", s, errdefs.ErrInvalidArgument)
}

// DefaultRegistration is open for a control plane that listens on loopback only (a
// local install, where whoever registers is on this machine) and invite otherwise.
func DefaultRegistration(listen string) RegistrationMode {
	if LoopbackListen(listen) {
		return RegistrationOpen
	}
	return RegistrationInvite
}

// LoopbackListen reports a listen address (host:port, or a bare host) that only this
// machine reaches: localhost or a loopback IP.
func LoopbackListen(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		host = listen
	}
	ip := net.ParseIP(host)
	return host == "localhost" || ip != nil && ip.IsLoopback()
}

// Invite codes are "inv_" and 24 random bytes in base64url (36 characters). Only their
// SHA-256 is stored; the first 8 characters tell them apart in a list.
const (
	InvitePrefix     = "inv_"
	inviteDisplayLen = 8
)

var inviteLen = len(InvitePrefix) + base64.RawURLEncoding.EncodedLen(24)

// Invite bounds.
const (
	DefaultInviteTTL = 7 * 24 * time.Hour
	MaxInviteTTL     = 90 * 24 * time.Hour
	MaxInviteUses    = 1000
)

// ParseInviteCode checks that s (spaces around it forgiven) has the form of an invite
// code; anything else is [errdefs.ErrPermissionDenied] as an unknown code is.
func ParseInviteCode(s string) (string, error) {
	s = strings.TrimSpace(s)
	rest, ok := strings.CutPrefix(s, InvitePrefix)
	if ok && len(s) == inviteLen {
		if b, err := base64.RawURLEncoding.Strict().DecodeString(rest); err == nil && len(b) == 24 {
			return s, nil
		}
	}
	return "", errBadInvite
}

// errBadInvite is the one answer to an invite code that is malformed, unknown, used up,
// expired or revoked.
var errBadInvite = fmt.Errorf("the invite code is not valid: unknown, used up, expired or revoked; ask an admin for a new one: %w", errdefs.ErrPermissionDenied)

func inviteHash(code string) []byte {
	h := sha256.Sum256([]byte(code))
	return h[:]
}

// InviteSpec is what a new invite is to be.
type InviteSpec struct {
	// Uses is how many registrations it allows (1 to MaxInviteUses; 0 means 1).
	Uses int
	// TTL is how long it lasts (0: DefaultInviteTTL; at most MaxInviteTTL).
	TTL time.Duration
}

// CreateInvite makes an invite as admin (who must be one). The code is returned only
// here; show it once.
func (s *Service) CreateInvite(ctx context.Context, admin User, spec InviteSpec) (string, store.Invite, error) {
	if !admin.IsAdmin() {
		return "", store.Invite{}, fmt.Errorf("invites: only an admin may make them: %w", errdefs.ErrPermissionDenied)
	}
	if spec.Uses == 0 {
		spec.Uses = 1
	}
	if spec.TTL == 0 {
		spec.TTL = DefaultInviteTTL
	}
	switch {
	case spec.Uses < 1 || spec.Uses > MaxInviteUses:
		return "", store.Invite{}, fmt.Errorf("uses: %d is not between 1 and %d: %w", spec.Uses, MaxInviteUses, errdefs.ErrInvalidArgument)
	case spec.TTL < 0 || spec.TTL > MaxInviteTTL:
		return "", store.Invite{}, fmt.Errorf("expires_in: %s is not between 0 and %s: %w", spec.TTL, MaxInviteTTL, errdefs.ErrInvalidArgument)
	}
	var b [24]byte
	_, _ = rand.Read(b[:])
	code := InvitePrefix + base64.RawURLEncoding.EncodeToString(b[:])
	now := s.now()
	var in store.Invite
	err := s.st.Update(ctx, func(tx *store.Tx) error {
		var err error
		in, err = tx.CreateInvite(ctx, store.Invite{CodeHash: inviteHash(code), Prefix: code[:inviteDisplayLen], CreatedBy: admin.ID,
			CreatedAt: now, ExpiresAt: now.Add(spec.TTL), MaxUses: spec.Uses})
		if err != nil {
			return err
		}
		return tx.AppendAudit(ctx, s.audit(admin.ID, "auth.invite.create", in.ID,
			map[string]any{"prefix": in.Prefix, "uses": in.MaxUses, "expires_at": in.ExpiresAt.Format(time.RFC3339)}))
	})
	if err != nil {
		return "", store.Invite{}, err
	}
	return code, in, nil
}

// ListInvites returns every invite, newest first (admins only).
func (s *Service) ListInvites(ctx context.Context, admin User) ([]store.Invite, error) {
	if !admin.IsAdmin() {
		return nil, fmt.Errorf("invites: only an admin may list them: %w", errdefs.ErrPermissionDenied)
	}
	return s.st.ListInvites(ctx)
}

// RevokeInvite revokes a standing invite (admins only); an unknown or revoked one is
// [errdefs.ErrNotFound].
func (s *Service) RevokeInvite(ctx context.Context, admin User, id string) error {
	if !admin.IsAdmin() {
		return fmt.Errorf("invites: only an admin may revoke them: %w", errdefs.ErrPermissionDenied)
	}
	return s.st.Update(ctx, func(tx *store.Tx) error {
		if err := tx.RevokeInvite(ctx, id, s.now()); err != nil {
			return err
		}
		return tx.AppendAudit(ctx, s.audit(admin.ID, "auth.invite.revoke", id, nil))
	})
}

// RegistrationMode is the mode the service registers in.
func (s *Service) RegistrationMode() RegistrationMode { return s.cfg.registration }

// SignUpRequest is a registration from the public page.
type SignUpRequest struct {
	Username string
	Password Password
	// Invite is the invite code, needed in invite mode.
	Invite string
	Client Client
}

// SignUp registers a plain user from the public page, under the registration mode:
// closed refuses, invite needs a standing invite (used once in the same transaction as
// the account is made), and every attempt that gets as far as the store counts
// against the per-address registration limit. Refusals are [errdefs.ErrPermissionDenied]
// naming the mode, or a [*LimitedError]; each is audited as "auth.register.refused" or
// "auth.register.limited".
func (s *Service) SignUp(ctx context.Context, req SignUpRequest) (*Registration, error) {
	mode := s.cfg.registration
	refuse := func(reason string, err error) (*Registration, error) {
		pass, suppressed := s.gate.pass("register:"+reason+":"+addrKey(req.Client.Addr), s.now())
		if !pass {
			return nil, err
		}
		detail := map[string]any{"ip": req.Client.Addr.String(), "mode": string(mode), "reason": reason}
		if suppressed > 0 {
			detail["suppressed"] = suppressed
		}
		ev := s.audit("", "auth.register.refused", auditName(req.Username), detail)
		if aerr := s.st.Update(ctx, func(tx *store.Tx) error { return tx.AppendAudit(ctx, ev) }); aerr != nil {
			return nil, aerr
		}
		return nil, err
	}
	switch mode {
	case RegistrationClosed:
		return refuse("closed", fmt.Errorf("registration is closed on this server (registration: closed); ask its admin for an account: %w", errdefs.ErrPermissionDenied))
	case RegistrationInvite:
		if strings.TrimSpace(req.Invite) == "" {
			return refuse("no invite", fmt.Errorf("registration on this server is by invitation (registration: invite): enter the invite code an admin gave you: %w", errdefs.ErrPermissionDenied))
		}
	}
	if err := CheckUsername(req.Username); err != nil {
		return nil, err
	}
	if err := CheckPasswordPolicy(req.Username, req.Password); err != nil {
		return nil, err
	}
	if _, err := s.reserve(ctx, []limitKey{{key: "register:" + addrKey(req.Client.Addr), limit: s.cfg.registerLimit, window: s.cfg.registerWindow}}, "registrations from this address"); err != nil {
		return nil, s.limited(ctx, "auth.register.limited", req.Username, req.Client, err)
	}
	var redeem func(*store.Tx) (string, error)
	if mode == RegistrationInvite {
		code, err := ParseInviteCode(req.Invite)
		if err != nil {
			return refuse("invalid invite", err)
		}
		redeem = func(tx *store.Tx) (string, error) {
			in, err := tx.RedeemInvite(ctx, inviteHash(code), s.now())
			if errors.Is(err, errdefs.ErrNotFound) {
				return "", errBadInvite
			}
			return in.ID, err
		}
	}
	reg, err := s.register(ctx, RegisterRequest{Username: req.Username, Password: req.Password, Role: store.RoleUser, Client: req.Client}, redeem)
	if errors.Is(err, errBadInvite) {
		return refuse("invalid invite", err)
	}
	return reg, err
}
