package web

import (
	"bytes"
	"embed"
	"errors"
	"html/template"
	"io/fs"
	"net/http"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/auth"
	"github.com/paddockhq/paddock/internal/errdefs"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed assets
var assetFS embed.FS

// Page names.
const (
	pageLogin    = "login"
	pageRegister = "register"
	pageRecovery = "recovery"
	pageCodes    = "codes"
	pageError    = "error"
	pageStart    = "start"
)

// templates holds each page parsed with the shared layout. Parsing at init makes
// a broken template fail every test, not a user's request.
var templates = func() map[string]*template.Template {
	m := map[string]*template.Template{}
	for _, name := range []string{pageLogin, pageRegister, pageRecovery, pageCodes, pageError, pageStart} {
		m[name] = template.Must(template.ParseFS(templateFS, "templates/layout.html", "templates/"+name+".html"))
	}
	return m
}()

// view is what a page shows. Username is echoed back after a failed post; a
// password never is.
type view struct {
	Title          string
	Error          string
	Notice         string
	Username       string
	Home           string
	MinPasswordLen int
	// Registration is the registration mode: open, invite or closed.
	Registration string
	Codes        []string
	Signed       *signedIn
	// CSRFToken is the session's, for a page's form (start).
	CSRFToken string
}

// signedIn is the login page's panel for a browser that already has a session.
type signedIn struct {
	Username  string
	CSRFToken string
	Role      string
	Other     string // the role to switch to
}

var titles = map[string]string{
	pageLogin:    "Sign in",
	pageRegister: "Create an account",
	pageRecovery: "Recover your account",
	pageCodes:    "Save your recovery codes",
	pageError:    "That did not work",
	pageStart:    "Open your app",
}

// render writes page name with status. The page is executed into a buffer first,
// so a template error becomes a clean 500, not half a page.
func (w *Web) render(rw http.ResponseWriter, status int, name string, v view) {
	if v.Title == "" {
		v.Title = titles[name]
	}
	v.Home, v.MinPasswordLen, v.Registration = w.home, auth.MinPasswordLen, string(w.auth.RegistrationMode())
	var buf bytes.Buffer
	if err := templates[name].ExecuteTemplate(&buf, "layout", v); err != nil {
		w.log.Error("rendering page", "page", name, "err", err)
		http.Error(rw, "internal error", http.StatusInternalServerError)
		return
	}
	rw.Header().Set("Content-Type", "text/html; charset=utf-8")
	rw.WriteHeader(status)
	_, _ = rw.Write(buf.Bytes())
}

func (w *Web) loginPage(rw http.ResponseWriter, r *http.Request) {
	v := view{}
	if sess, err := w.auth.SessionFromRequest(r.Context(), r); err == nil {
		role := w.roleOf(r)
		other := api.RoleDev
		if role == api.RoleDev {
			other = api.RoleLive
		}
		v.Title = "You are signed in"
		v.Signed = &signedIn{Username: sess.User.Username, CSRFToken: auth.CSRFToken(sess), Role: role, Other: other}
	}
	w.render(rw, http.StatusOK, pageLogin, v)
}

// startPage: GET /start, where a signed-in browser whose sandboxes were never made is
// sent instead of to its app; a button there makes and starts them.
func (w *Web) startPage(rw http.ResponseWriter, r *http.Request) {
	sess, err := w.auth.SessionFromRequest(r.Context(), r)
	if err != nil {
		http.Redirect(rw, r, "/login", http.StatusSeeOther)
		return
	}
	w.render(rw, http.StatusOK, pageStart, view{Username: sess.User.Username, CSRFToken: auth.CSRFToken(sess)})
}

func (w *Web) registerPage(rw http.ResponseWriter, r *http.Request) {
	w.render(rw, http.StatusOK, pageRegister, view{})
}

func (w *Web) recoveryPage(rw http.ResponseWriter, r *http.Request) {
	w.render(rw, http.StatusOK, pageRecovery, view{})
}

// assets serves the embedded stylesheet. Directories are not listed.
func (w *Web) assets() http.HandlerFunc {
	sub, err := fs.Sub(assetFS, "assets")
	if err != nil {
		panic(err)
	}
	files := http.StripPrefix("/auth/assets/", http.FileServerFS(sub))
	return func(rw http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/") {
			api.WriteErrorCode(rw, http.StatusNotFound, api.CodeNotFound, "no such asset")
			return
		}
		// Not secret and the same for everyone: caching it is fine.
		rw.Header().Set("Cache-Control", "public, max-age=3600")
		files.ServeHTTP(rw, r)
	}
}

// fail answers a failed request: JSON in the API's error shape, or, for a form
// post from page, that page again with the message, the username typed, and the
// status the JSON answer would have had. Rate-limited answers say when to retry.
func (w *Web) fail(rw http.ResponseWriter, m media, page string, username string, err error) {
	var le *auth.LimitedError
	if errors.As(err, &le) {
		rw.Header().Set("Retry-After", strconv.Itoa(int((le.RetryAfter+999_999_999)/1_000_000_000)))
	}
	if m == mediaJSON || page == "" {
		api.WriteError(rw, w.log, err)
		return
	}
	status, _ := api.StatusOf(err)
	msg := userMessage(err)
	if status == http.StatusInternalServerError {
		w.log.Error("internal error", "err", err)
		msg = "Something went wrong on our side. Try again; if it keeps happening, the server log has the details."
	}
	w.render(rw, status, page, view{Error: msg, Username: username})
}

// sentinels are the taxonomy's words that end wrapped messages ("...: invalid
// argument"): right for a JSON code, noise on a page.
var sentinels = []error{
	errdefs.ErrInvalidArgument, errdefs.ErrNotFound, errdefs.ErrAlreadyExists, errdefs.ErrPermissionDenied,
	errdefs.ErrUnavailable, errdefs.ErrLimitExceeded, errdefs.ErrFailedPrecondition, errdefs.ErrDeadlineExceeded,
	errdefs.ErrUnauthenticated, api.ErrTooLarge, api.ErrUnsupportedMedia,
}

// userMessage is err's message for a page: without the taxonomy's suffix, as a
// sentence.
func userMessage(err error) string {
	msg := err.Error()
	for _, s := range sentinels {
		msg = strings.TrimSuffix(msg, ": "+s.Error())
	}
	r, n := utf8.DecodeRuneInString(msg)
	msg = string(unicode.ToUpper(r)) + msg[n:]
	if !strings.HasSuffix(msg, ".") {
		msg += "."
	}
	return msg
}
