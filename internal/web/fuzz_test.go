package web

import (
	"net/http"
	"net/url"
	"reflect"
	"testing"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/auth"
)

// FuzzDecodeBody: the body decoder reads untrusted bytes from anyone on the
// network. It never panics, every refusal is a 4xx in the taxonomy, and an
// accepted form set exactly the fields it named, to the values it gave.
func FuzzDecodeBody(f *testing.F) {
	f.Add(false, []byte(`{"username":"alice","password":"correct horse battery staple"}`))
	f.Add(false, []byte(`{"username":"alice","recovery_code":"abcd-efgh","new_password":"x"} `))
	f.Add(false, []byte(`{"role":"dev"}{}`))
	f.Add(false, []byte(`{"current_password":"old one","new_password":"new one"}`))
	f.Add(true, []byte("current_password=a&current_password=b"))
	f.Add(false, []byte(`{"username":"\u0000\ud800"}`))
	f.Add(true, []byte("username=alice&password=correct+horse&csrf_token=abc"))
	f.Add(true, []byte("username=a&username=b"))
	f.Add(true, []byte("role=%zz&name=%FF"))
	f.Add(true, []byte(";;&&=="))
	f.Add(true, []byte(""))
	f.Fuzz(func(t *testing.T, form bool, body []byte) {
		m := mediaJSON
		if form {
			m = mediaForm
		}
		for _, dst := range []any{&api.Credentials{}, &api.RecoverRequest{}, &api.TokenRequest{}, &api.RoleRequest{}, &api.ChangePasswordRequest{}, &api.RenewRecoveryCodesRequest{}, &struct{}{}} {
			vals, err := decodeBody(m, body, dst, false)
			if err != nil {
				if status, _ := api.StatusOf(err); status < 400 || status > 499 {
					t.Fatalf("%T from %q: status %d for %v", dst, body, status, err)
				}
				continue
			}
			if m != mediaForm {
				continue
			}
			fields := formFields(dst)
			for name, f := range fields {
				if f.String() != vals.Get(name) {
					t.Fatalf("%T field %s = %q, form said %q", dst, name, f.String(), vals.Get(name))
				}
			}
			for k := range vals {
				if _, ok := fields[k]; !ok && k != auth.CSRFFormField {
					t.Fatalf("%T accepted unknown field %q", dst, k)
				}
			}
		}
	})
}

// The request decoders as the handlers use them: content types map to the right
// medium, and nothing but JSON and urlencoded forms is read.
func TestMediaOf(t *testing.T) {
	for ct, want := range map[string]int{
		"":                                  int(mediaJSON),
		"application/json":                  int(mediaJSON),
		"application/json; charset=utf-8":   int(mediaJSON),
		"application/merge-patch+json":      int(mediaJSON),
		"application/x-www-form-urlencoded": int(mediaForm),
		"APPLICATION/X-WWW-FORM-URLENCODED": int(mediaForm),
		"text/plain":                        -1,
		"multipart/form-data; boundary=x":   -1,
		"application/":                      -1,
	} {
		r := &http.Request{Header: http.Header{}}
		if ct != "" {
			r.Header.Set("Content-Type", ct)
		}
		m, err := mediaOf(r)
		got := int(m)
		if err != nil {
			got = -1
		}
		if got != want {
			t.Errorf("mediaOf(%q) = %d, %v; want %d", ct, m, err, want)
		}
	}
	var in api.Credentials
	vals, err := decodeBody(mediaForm, []byte("username=al%69ce&password=a+b"), &in, false)
	if err != nil || in.Username != "alice" || in.Password != "a b" || !reflect.DeepEqual(vals, url.Values{"username": {"alice"}, "password": {"a b"}}) {
		t.Errorf("decodeBody: %+v %v %v", in, vals, err)
	}
}
