package web

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/auth"
	"github.com/paddockhq/paddock/internal/errdefs"
)

// begin does what every POST does first, cheapest check first: learn the body's
// format, refuse cross-origin browser requests (for the unauthenticated forms this
// is the login-CSRF defence), and read the capped body into dst. The parsed form
// is installed as r.PostForm, where auth's CSRF check looks for its token. The
// returned media is right even on error, so the failure is answered in kind.
func (w *Web) begin(rw http.ResponseWriter, r *http.Request, dst any, allowEmpty bool) (media, error) {
	m, err := mediaOf(r)
	if err != nil {
		return m, err
	}
	if err := w.auth.CheckOrigin(r); err != nil {
		return m, err
	}
	body, err := readBody(rw, r)
	if err != nil {
		return m, err
	}
	form, err := decodeBody(m, body, dst, allowEmpty)
	if err != nil {
		return m, err
	}
	r.PostForm = form
	return m, nil
}

// redirect answers a form post with 303, so that reloading the next page does not
// post again.
func redirect(rw http.ResponseWriter, r *http.Request, to string) {
	http.Redirect(rw, r, to, http.StatusSeeOther)
}

// login: POST /auth/login. Form: 303 to Home; JSON: 200 api.Session. Either way
// with a fresh session cookie.
func (w *Web) login(rw http.ResponseWriter, r *http.Request) {
	var in api.Credentials
	m, err := w.begin(rw, r, &in, false)
	if err != nil {
		w.fail(rw, m, pageLogin, in.Username, err)
		return
	}
	sess, err := w.auth.Login(r.Context(), auth.LoginRequest{Username: in.Username, Password: auth.Password(in.Password), Client: w.client(r)})
	if err != nil {
		w.fail(rw, m, pageLogin, in.Username, err)
		return
	}
	http.SetCookie(rw, w.auth.SessionCookie(r, sess))
	if m == mediaForm {
		redirect(rw, r, w.home)
		return
	}
	api.WriteJSON(rw, http.StatusOK, api.Session{User: apiUser(sess.User), CSRFToken: auth.CSRFToken(sess), Role: w.roleOf(r)})
}

// register: POST /auth/register, under the registration mode (auth.Service.SignUp).
// It only ever creates plain users. Form: the page
// of recovery codes, rendered in this response and nowhere else (so they are shown
// once and never stored); JSON: 201 api.Registration. Both sign the new user in.
func (w *Web) register(rw http.ResponseWriter, r *http.Request) {
	var in api.RegisterRequest
	m, err := w.begin(rw, r, &in, false)
	if err != nil {
		w.fail(rw, m, pageRegister, in.Username, err)
		return
	}
	ctx, client := r.Context(), w.client(r)
	reg, err := w.auth.SignUp(ctx, auth.SignUpRequest{
		Username: in.Username, Password: auth.Password(in.Password), Invite: in.Invite, Client: client,
	})
	if err != nil {
		w.fail(rw, m, pageRegister, in.Username, err)
		return
	}
	// The account exists now; a failed sign-in (the address is rate limited, say)
	// must not hide the codes, which cannot be shown again. The user signs in later.
	sess, err := w.auth.Login(ctx, auth.LoginRequest{Username: in.Username, Password: auth.Password(in.Password), Client: client})
	if err != nil {
		w.log.WarnContext(ctx, "signing in a new account", "user", reg.User, "err", err)
	} else {
		http.SetCookie(rw, w.auth.SessionCookie(r, sess))
	}
	codes := make([]string, len(reg.RecoveryCodes))
	for i, c := range reg.RecoveryCodes {
		codes[i] = c.Reveal()
	}
	if m == mediaJSON {
		api.WriteJSON(rw, http.StatusCreated, api.Registration{User: apiUser(reg.User), RecoveryCodes: codes})
		return
	}
	v := view{Codes: codes}
	if sess == nil {
		v.Notice = "Your account was created, but you could not be signed in yet. Continue to sign in."
	}
	w.render(rw, http.StatusOK, pageCodes, v)
}

// recover: POST /auth/recovery. A recovery code sets a new password and signs out
// every session of the user. Form: signed in with the new password, 303 to Home;
// JSON: 204.
func (w *Web) recover(rw http.ResponseWriter, r *http.Request) {
	var in api.RecoverRequest
	m, err := w.begin(rw, r, &in, false)
	if err != nil {
		w.fail(rw, m, pageRecovery, in.Username, err)
		return
	}
	ctx, client := r.Context(), w.client(r)
	err = w.auth.Recover(ctx, auth.RecoverRequest{
		Username: in.Username, Code: auth.RecoveryCode(in.RecoveryCode), NewPassword: auth.Password(in.NewPassword), Client: client,
	})
	if err != nil {
		w.fail(rw, m, pageRecovery, in.Username, err)
		return
	}
	if m == mediaJSON {
		http.SetCookie(rw, w.auth.ClearSessionCookie(r)) // revoked with the others
		rw.WriteHeader(http.StatusNoContent)
		return
	}
	sess, err := w.auth.Login(ctx, auth.LoginRequest{Username: in.Username, Password: auth.Password(in.NewPassword), Client: client})
	if err != nil {
		w.log.WarnContext(ctx, "signing in after recovery", "err", err)
		http.SetCookie(rw, w.auth.ClearSessionCookie(r))
		redirect(rw, r, "/login")
		return
	}
	http.SetCookie(rw, w.auth.SessionCookie(r, sess))
	redirect(rw, r, w.home)
}

// logout: POST /auth/logout, by session cookie with its CSRF token. It ends the
// session and clears the session and role cookies. Form: 303 to /login (also when
// the session had already ended: there is nothing to protect); JSON: 204, or 401
// without a session.
func (w *Web) logout(rw http.ResponseWriter, r *http.Request) {
	var in struct{}
	m, err := w.begin(rw, r, &in, true)
	if err != nil {
		w.fail(rw, m, pageError, "", err)
		return
	}
	ctx := r.Context()
	sess, err := w.auth.SessionFromRequest(ctx, r)
	if err == nil {
		if err = w.auth.CheckCSRF(r, sess); err != nil {
			w.fail(rw, m, pageError, "", err)
			return
		}
		err = w.auth.Logout(ctx, sess)
	}
	if err != nil && !(m == mediaForm && errors.Is(err, errdefs.ErrUnauthenticated)) {
		w.fail(rw, m, pageError, "", err)
		return
	}
	http.SetCookie(rw, w.auth.ClearSessionCookie(r))
	http.SetCookie(rw, w.roleCookie(r, "", -1))
	if m == mediaForm {
		redirect(rw, r, "/login")
		return
	}
	rw.WriteHeader(http.StatusNoContent)
}

// token: POST /auth/token, JSON only: a username and password for an API token
// (how `paddock login` signs the CLI in). Limited exactly like /auth/login.
func (w *Web) token(rw http.ResponseWriter, r *http.Request) {
	var in api.TokenRequest
	m, err := mediaOf(r)
	if err == nil && m != mediaJSON {
		err = fmt.Errorf("POST /auth/token takes a JSON body (Content-Type: application/json): %w", api.ErrUnsupportedMedia)
	}
	if err == nil {
		_, err = w.begin(rw, r, &in, false)
	}
	if err != nil {
		w.fail(rw, mediaJSON, "", "", err)
		return
	}
	tok, info, err := w.auth.LoginToken(r.Context(), auth.LoginRequest{Username: in.Username, Password: auth.Password(in.Password), Client: w.client(r)}, in.Name)
	if err != nil {
		w.fail(rw, mediaJSON, "", "", err)
		return
	}
	exp := info.ExpiresAt
	api.WriteJSON(rw, http.StatusCreated, api.Token{
		ID: info.ID, Name: info.Name, Prefix: info.Prefix, CreatedAt: info.CreatedAt, Secret: tok.Reveal(),
		ExpiresAt: &exp, Scopes: auth.TokenScopes(info).Strings(),
	})
}

// setRole: POST /auth/role {role: live|dev} sets the role cookie that the proxy
// routes by. Cookie callers need the CSRF token. Form: 303 to Home; JSON: 204.
func (w *Web) setRole(rw http.ResponseWriter, r *http.Request) {
	var in api.RoleRequest
	m, err := w.begin(rw, r, &in, false)
	if err == nil {
		err = w.authorize(r)
	}
	if err == nil && in.Role != api.RoleLive && in.Role != api.RoleDev {
		err = errInvalidRole(in.Role)
	}
	if err != nil {
		w.fail(rw, m, pageError, "", err)
		return
	}
	http.SetCookie(rw, w.roleCookie(r, in.Role, roleCookieMaxAge))
	if m == mediaForm {
		redirect(rw, r, w.home)
		return
	}
	rw.WriteHeader(http.StatusNoContent)
}

// authorize identifies r's caller and applies the CSRF check.
func (w *Web) authorize(r *http.Request) error {
	c, err := w.Identify(r)
	if err != nil {
		return err
	}
	return w.CheckCSRF(r, c)
}

// session: GET /auth/session says who is signed in, the CSRF token scripts need
// (session callers only), and the current role.
func (w *Web) session(rw http.ResponseWriter, r *http.Request) {
	c, err := w.Identify(r)
	if err != nil {
		w.fail(rw, mediaJSON, "", "", err)
		return
	}
	out := api.Session{User: apiUser(c.User), Role: c.Role}
	if c.Session != nil {
		out.CSRFToken = auth.CSRFToken(c.Session)
	}
	api.WriteJSON(rw, http.StatusOK, out)
}

func errInvalidRole(role string) error {
	return fmt.Errorf("role %q: must be %q or %q: %w", errdefs.Clip(role, 40), api.RoleLive, api.RoleDev, errdefs.ErrInvalidArgument)
}

// startSandboxes: POST /auth/start makes and starts the caller's standing sandboxes (a
// token needs scope write). Form: 303 to Home; JSON: 204.
func (w *Web) startSandboxes(rw http.ResponseWriter, r *http.Request) {
	var in struct{}
	m, err := w.begin(rw, r, &in, true)
	var c *Caller
	if err == nil {
		c, err = w.Identify(r)
	}
	if err == nil {
		err = w.CheckCSRF(r, c)
	}
	if err == nil && c.Token != nil && !auth.TokenScopes(*c.Token).Has(auth.ScopeWrite) {
		err = auth.ScopeError(auth.ScopeWrite, "POST /auth/start")
	}
	if err == nil {
		err = w.start(r.Context(), c.User)
	}
	if err != nil {
		w.fail(rw, m, pageError, "", err)
		return
	}
	if m == mediaForm {
		redirect(rw, r, w.home)
		return
	}
	rw.WriteHeader(http.StatusNoContent)
}
