package web

import (
	"bytes"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"strings"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/auth"
	"github.com/paddockhq/paddock/internal/errdefs"
)

// The console: the control plane's own pages for what a user administers (sandboxes,
// roles, secrets, API tokens, account, events; for admins, users and every sandbox).
// GET /console is one server-rendered page whose small script (assets/console.js)
// calls the existing /api/v1 with the session cookie and its CSRF token; the account
// actions the API has no route for (change password, new recovery codes) are the
// /auth endpoints below, which take a browser session only.

// consoleTemplate is the console's own document: wider than the sign-in card's layout.
var consoleTemplate = template.Must(template.ParseFS(templateFS, "templates/console.html"))

// consoleView is what the console page renders on the server: who is signed in and
// the CSRF token its script sends. Everything else the script fetches.
type consoleView struct {
	Username       string
	Admin          bool
	CSRFToken      string
	MinPasswordLen int
}

func (w *Web) registerConsole(mux *http.ServeMux) {
	get := []string{http.MethodGet, http.MethodHead}
	post := []string{http.MethodPost}
	mux.Handle("/console", w.route(get, w.consolePage))
	mux.Handle("/console/desktop/{id}", w.route(get, w.consoleDesktop))
	// Everything else under /console is the control plane's: 404, never the app.
	mux.Handle("/console/", w.route(nil, func(rw http.ResponseWriter, r *http.Request) {
		api.WriteErrorCode(rw, http.StatusNotFound, api.CodeNotFound, "no such console page; the console is /console")
	}))
	mux.Handle("/auth/password", w.route(post, w.changePassword))
	mux.Handle("/auth/recovery-codes", w.route(post, w.renewRecoveryCodes))
}

// consolePage: GET /console. A browser without a session is sent to sign in.
func (w *Web) consolePage(rw http.ResponseWriter, r *http.Request) {
	sess, err := w.auth.SessionFromRequest(r.Context(), r)
	if err != nil {
		redirect(rw, r, "/login")
		return
	}
	v := consoleView{
		Username: sess.User.Username, Admin: sess.User.IsAdmin(),
		CSRFToken: auth.CSRFToken(sess), MinPasswordLen: auth.MinPasswordLen,
	}
	var buf bytes.Buffer
	if err := consoleTemplate.ExecuteTemplate(&buf, "console", v); err != nil {
		w.log.Error("rendering page", "page", "console", "err", err)
		http.Error(rw, "internal error", http.StatusInternalServerError)
		return
	}
	rw.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = rw.Write(buf.Bytes())
}

// consoleDesktop: GET /console/desktop/{id} sends the browser on to sandbox id's
// desktop through the apps-host handoff, which checks that the sandbox is the caller's.
func (w *Web) consoleDesktop(rw http.ResponseWriter, r *http.Request) {
	if w.desktopURL == nil {
		api.WriteErrorCode(rw, http.StatusNotFound, api.CodeNotFound, "this server serves no desktops")
		return
	}
	to, err := w.desktopURL(r, r.PathValue("id"))
	if err != nil {
		api.WriteError(rw, w.log, err)
		return
	}
	http.Redirect(rw, r, to, http.StatusSeeOther)
}

// sessionCaller is the browser session of a POST that needs one: identified, past the
// CSRF check. An API token is refused: these actions are for a person at a browser.
func (w *Web) sessionCaller(r *http.Request, what string) (*auth.Session, error) {
	c, err := w.Identify(r)
	if err != nil {
		return nil, err
	}
	if c.Session == nil {
		return nil, fmt.Errorf("%s needs a browser session, not an API token: %w", what, errdefs.ErrPermissionDenied)
	}
	if err := w.CheckCSRF(r, c); err != nil {
		return nil, err
	}
	return c.Session, nil
}

// wrongCurrent names the field when the current password does not match: on a
// signed-in page, "invalid username or password" would point at the wrong thing, and
// a 401 would read as a lost session.
func wrongCurrent(err error) error {
	if errors.Is(err, auth.ErrInvalidCredentials) {
		return fmt.Errorf("current_password: that is not your current password: %w", errdefs.ErrPermissionDenied)
	}
	return err
}

// jsonOnly refuses a body that is not JSON: the console's script sends JSON, and a
// form would need a page of its own to answer.
func jsonOnly(r *http.Request, what string) error {
	m, err := mediaOf(r)
	if err == nil && m != mediaJSON {
		err = fmt.Errorf("%s takes a JSON body (Content-Type: application/json): %w", what, api.ErrUnsupportedMedia)
	}
	return err
}

// changePassword: POST /auth/password {current_password, new_password}, JSON, by a
// browser session with its CSRF token. The new password meets the registration
// policy; every other session of the user ends and every API token is revoked; this
// session is kept. 204.
func (w *Web) changePassword(rw http.ResponseWriter, r *http.Request) {
	var in api.ChangePasswordRequest
	err := jsonOnly(r, "POST /auth/password")
	if err == nil {
		_, err = w.begin(rw, r, &in, false)
	}
	var sess *auth.Session
	if err == nil {
		sess, err = w.sessionCaller(r, "changing the password")
	}
	if err == nil && in.CurrentPassword == "" {
		err = fmt.Errorf("current_password: required: %w", errdefs.ErrInvalidArgument)
	}
	if err == nil {
		err = w.auth.ChangePassword(r.Context(), sess, auth.Password(in.CurrentPassword), auth.Password(in.NewPassword), w.client(r))
		err = newPasswordField(wrongCurrent(err))
	}
	if err != nil {
		w.fail(rw, mediaJSON, "", "", err)
		return
	}
	rw.WriteHeader(http.StatusNoContent)
}

// newPasswordField prefixes a password-policy refusal with the field it is about.
func newPasswordField(err error) error {
	if err != nil && errors.Is(err, errdefs.ErrInvalidArgument) && !strings.HasPrefix(err.Error(), "current_password") {
		return fmt.Errorf("new_password: %w", err)
	}
	return err
}

// renewRecoveryCodes: POST /auth/recovery-codes {current_password}, JSON, by a browser
// session with its CSRF token: new recovery codes, shown this once (201); the old ones
// stop working.
func (w *Web) renewRecoveryCodes(rw http.ResponseWriter, r *http.Request) {
	var in api.RenewRecoveryCodesRequest
	err := jsonOnly(r, "POST /auth/recovery-codes")
	if err == nil {
		_, err = w.begin(rw, r, &in, false)
	}
	var sess *auth.Session
	if err == nil {
		sess, err = w.sessionCaller(r, "making new recovery codes")
	}
	if err == nil && in.CurrentPassword == "" {
		err = fmt.Errorf("current_password: required: %w", errdefs.ErrInvalidArgument)
	}
	var codes []auth.RecoveryCode
	if err == nil {
		codes, err = w.auth.RenewRecoveryCodes(r.Context(), sess, auth.Password(in.CurrentPassword), w.client(r))
		err = wrongCurrent(err)
	}
	if err != nil {
		w.fail(rw, mediaJSON, "", "", err)
		return
	}
	out := api.RecoveryCodes{RecoveryCodes: make([]string, len(codes))}
	for i, c := range codes {
		out.RecoveryCodes[i] = c.Reveal()
	}
	api.WriteJSON(rw, http.StatusCreated, out)
}
