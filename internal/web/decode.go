package web

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"unicode/utf8"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/auth"
	"github.com/paddockhq/paddock/internal/errdefs"
)

// MaxBody caps every /auth request body. Credentials, a recovery code and a CSRF
// token fit many times over; the cap is applied before any parsing, so a large
// body costs only its first 64 KiB.
const MaxBody = 64 << 10

// media is the format of a request body, and so of the answer: a browser's form
// post gets a page or a redirect, JSON gets JSON.
type media int

const (
	mediaJSON media = iota
	mediaForm
)

// mediaOf says what r's body is. No Content-Type counts as JSON, as in
// api.DecodeJSON (scripts that forget it still get JSON errors). Anything but JSON
// and a urlencoded form is refused: multipart has no use here, and text/plain is
// what a cross-site form uses to smuggle "JSON" past CORS.
func mediaOf(r *http.Request) (media, error) {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return mediaJSON, nil
	}
	mt, _, err := mime.ParseMediaType(ct)
	switch {
	case err != nil:
	case mt == "application/json" || strings.HasSuffix(mt, "+json"):
		return mediaJSON, nil
	case mt == "application/x-www-form-urlencoded":
		return mediaForm, nil
	}
	return mediaJSON, fmt.Errorf("Content-Type %q: want application/json or application/x-www-form-urlencoded: %w", ct, api.ErrUnsupportedMedia)
}

// readBody reads r's body up to MaxBody; more is api.ErrTooLarge.
func readBody(rw http.ResponseWriter, r *http.Request) ([]byte, error) {
	b, err := io.ReadAll(http.MaxBytesReader(rw, r.Body, MaxBody))
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return nil, fmt.Errorf("request body over %d bytes: %w", MaxBody, api.ErrTooLarge)
	}
	if err != nil {
		return nil, fmt.Errorf("reading request body: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	return b, nil
}

// decodeBody parses body into dst, a pointer to a struct of string fields named by
// their json tags. JSON is parsed strictly by api.Decode. A form may carry each of
// those fields and the CSRF token at most once, as UTF-8, and nothing else; the
// parsed form is returned so that the CSRF check can read its token. An empty body
// is an error unless allowEmpty (logout has nothing to say but its CSRF token).
func decodeBody(m media, body []byte, dst any, allowEmpty bool) (url.Values, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		if allowEmpty {
			return url.Values{}, nil
		}
		if m == mediaForm {
			return nil, fmt.Errorf("request body: empty form: %w", errdefs.ErrInvalidArgument)
		}
	}
	if m == mediaJSON {
		return url.Values{}, api.Decode(bytes.NewReader(body), dst, MaxBody)
	}
	return decodeForm(body, dst)
}

func decodeForm(body []byte, dst any) (url.Values, error) {
	vals, err := url.ParseQuery(string(body))
	if err != nil {
		return nil, fmt.Errorf("request body: malformed form encoding: %w", errdefs.ErrInvalidArgument)
	}
	fields := formFields(dst)
	for k, vs := range vals {
		f, known := fields[k]
		if !known && k != auth.CSRFFormField {
			return nil, fmt.Errorf("request body: unknown field %q: %w", errdefs.Clip(k, 40), errdefs.ErrInvalidArgument)
		}
		if len(vs) != 1 {
			return nil, fmt.Errorf("request body: field %q given %d times: %w", k, len(vs), errdefs.ErrInvalidArgument)
		}
		if !utf8.ValidString(vs[0]) {
			return nil, fmt.Errorf("request body: field %q is not UTF-8 text: %w", k, errdefs.ErrInvalidArgument)
		}
		if known {
			f.SetString(vs[0])
		}
	}
	return vals, nil
}

// formFields maps the json tag names of *dst's string fields to the fields.
func formFields(dst any) map[string]reflect.Value {
	v := reflect.ValueOf(dst).Elem()
	out := make(map[string]reflect.Value, v.NumField())
	for i := range v.NumField() {
		f := v.Type().Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name != "" && name != "-" && f.Type.Kind() == reflect.String {
			out[name] = v.Field(i)
		}
	}
	return out
}
