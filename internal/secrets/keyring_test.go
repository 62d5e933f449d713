package secrets

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
)

var (
	key1 = base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 32))
	key2 = base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{2}, 32))
)

func TestParseKeyring(t *testing.T) {
	tests := []struct {
		name, in string
		primary  int
		versions string
		err      string
	}{
		{"one key", "paddock-keyring 1\nprimary 1\nkey 1 " + key1 + "\n", 1, "[1]", ""},
		{"comments, blanks, CRLF, any order", "# hi\n\r\npaddock-keyring 1\r\nkey 2 " + key2 + "\r\n  key 1   " + key1 + "\nprimary 2\n", 2, "[1 2]", ""},
		{"empty", "", 0, "", "empty; want the header"},
		{"no header", "primary 1\nkey 1 " + key1, 0, "", `line 1: want the header "paddock-keyring 1" first`},
		{"future format", "paddock-keyring 2\nprimary 1\nkey 1 " + key1, 0, "", "line 1: want the header"},
		{"no primary", "paddock-keyring 1\nkey 1 " + key1, 0, "", "no primary line"},
		{"no key", "paddock-keyring 1\nprimary 1", 0, "", "no key line"},
		{"primary without key", "paddock-keyring 1\nprimary 2\nkey 1 " + key1, 0, "", "primary 2 has no key line"},
		{"two primaries", "paddock-keyring 1\nprimary 1\nprimary 1\nkey 1 " + key1, 0, "", "line 3: a second primary line"},
		{"duplicate version", "paddock-keyring 1\nprimary 1\nkey 1 " + key1 + "\nkey 1 " + key2, 0, "", "line 4: key version 1 a second time"},
		{"short key", "paddock-keyring 1\nprimary 1\nkey 1 " + key1[:40], 0, "", "line 3: key 1: want standard base64 of 32 bytes"},
		{"URL base64", "paddock-keyring 1\nprimary 1\nkey 1 " + base64.URLEncoding.EncodeToString(bytes.Repeat([]byte{0xfb}, 32)), 0, "", "want standard base64"},
		{"version zero", "paddock-keyring 1\nprimary 0\nkey 0 " + key1, 0, "", "line 2: primary: version must be a number from 1"},
		{"leading zero", "paddock-keyring 1\nprimary 01\nkey 1 " + key1, 0, "", "line 2: primary: version must be"},
		{"signed", "paddock-keyring 1\nprimary +1\nkey 1 " + key1, 0, "", "version must be"},
		{"huge version", "paddock-keyring 1\nprimary 2147483648\nkey 1 " + key1, 0, "", "version must be"},
		{"unknown line", "paddock-keyring 1\nprimary 1\nkey 1 " + key1 + "\nkeys 2 x", 0, "", `line 4: want "primary VERSION" or "key VERSION BASE64"`},
		{"too big", "paddock-keyring 1\n" + strings.Repeat("#", maxKeyringBytes), 0, "", "over 65536 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k, err := parseKeyring([]byte(tt.in))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err %v, want %q", err, tt.err)
				}
				if strings.Contains(err.Error(), key1[:20]) || strings.Contains(err.Error(), key2[:20]) {
					t.Fatalf("the error quotes a key: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if k.primary != tt.primary || fmt.Sprint(k.versions()) != tt.versions {
				t.Fatalf("primary %d versions %v", k.primary, k.versions())
			}
			again, err := parseKeyring(k.marshal())
			if err != nil || again.primary != k.primary || !sameKeys(again, k) {
				t.Fatalf("marshal does not parse back: %v\n%s", err, k.marshal())
			}
		})
	}
}

func TestParseEnvKey(t *testing.T) {
	for _, tt := range []struct{ in, err string }{
		{key1, ""},
		{" " + key1 + "\n", ""},
		{"paddock-keyring 1\nprimary 1\nkey 1 " + key1, ""},
		{"", "want standard base64 of 32 random bytes"},
		{key1[:43], "want standard base64"},
		{base64.StdEncoding.EncodeToString(make([]byte, 16)), "want standard base64 of 32"},
		{"paddock-keyring 1\nprimary 1", "no key line"},
	} {
		k, err := parseEnvKey(tt.in)
		if tt.err == "" {
			if err != nil || k.primary != 1 {
				t.Errorf("parseEnvKey(%q): %v", tt.in, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.err) {
			t.Errorf("parseEnvKey(%q): %v, want %q", tt.in, err, tt.err)
		}
	}
}

func sameKeys(a, b *keyring) bool {
	if len(a.keys) != len(b.keys) {
		return false
	}
	for v, k := range a.keys {
		if !bytes.Equal(k, b.keys[v]) {
			return false
		}
	}
	return true
}
