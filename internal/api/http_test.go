package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/paddockhq/paddock/internal/errdefs"
)

func TestWriteErrorMapsTheTaxonomy(t *testing.T) {
	cases := []struct {
		err    error
		status int
		code   string
		msg    string
	}{
		{fmt.Errorf("name: too long: %w", errdefs.ErrInvalidArgument), 400, CodeInvalidArgument, "name: too long"},
		{fmt.Errorf("sign in: %w", errdefs.ErrUnauthenticated), 401, CodeUnauthenticated, "sign in"},
		{fmt.Errorf("sandbox sb-x: %w", errdefs.ErrNotFound), 404, CodeNotFound, "sandbox sb-x: not found"},
		{fmt.Errorf("quota: %w", errdefs.ErrLimitExceeded), 429, CodeLimitExceeded, "quota"},
		{fmt.Errorf("body over 1 MiB: %w", ErrTooLarge), 413, CodeTooLarge, "body over 1 MiB"},
		{errors.New("disk on fire at /secret/path"), 500, CodeInternal, "internal error; the server log has the details"},
	}
	for _, tc := range cases {
		rec := httptest.NewRecorder()
		WriteError(rec, nil, tc.err)
		var e Error
		if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil {
			t.Fatal(err)
		}
		if rec.Code != tc.status || e.Error.Code != tc.code || e.Error.Message != tc.msg {
			t.Errorf("%v → %d %+v, want %d %s %q", tc.err, rec.Code, e.Error, tc.status, tc.code, tc.msg)
		}
	}
}

func TestDecodeJSONIsStrict(t *testing.T) {
	type req struct {
		Name string `json:"name"`
		N    int    `json:"n"`
	}
	cases := []struct {
		ctype, body string
		want        error
		says        string
	}{
		{"application/json", `{"name":"a","n":1}`, nil, ""},
		{"", `{"name":"a"}`, nil, ""},
		{"application/json; charset=utf-8", `{"name":"a"}`, nil, ""},
		{"application/json", `{"nam":"a"}`, errdefs.ErrInvalidArgument, `unknown field "nam"`},
		{"application/json", `{"n":"x"}`, errdefs.ErrInvalidArgument, "field n"},
		{"application/json", `{"name":"a"}{}`, errdefs.ErrInvalidArgument, "more than one"},
		{"application/json", ``, errdefs.ErrInvalidArgument, "empty"},
		{"application/json", `{"name":`, errdefs.ErrInvalidArgument, "ends early"},
		{"application/json", `{"name":"` + strings.Repeat("a", 200) + `"}`, ErrTooLarge, "over 100 bytes"},
		{"text/plain", `{}`, ErrUnsupportedMedia, "text/plain"},
	}
	for _, tc := range cases {
		r := httptest.NewRequest("POST", "/", strings.NewReader(tc.body))
		if tc.ctype != "" {
			r.Header.Set("Content-Type", tc.ctype)
		}
		var v req
		err := DecodeJSON(httptest.NewRecorder(), r, &v, 100)
		if tc.want == nil {
			if err != nil || v.Name != "a" {
				t.Errorf("%q: %v, %+v", tc.body, err, v)
			}
			continue
		}
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%.30q: %v, want %v saying %q", tc.body, err, tc.want, tc.says)
		}
		if s, _ := StatusOf(err); s >= 500 {
			t.Errorf("%.30q: status %d for a client error", tc.body, s)
		}
	}
}
