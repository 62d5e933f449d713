package secrets

import (
	"bytes"
	"testing"
)

// FuzzParseKeyring: the key file parser never panics, and what it accepts is a keyring
// that holds together (primary among 32-byte keys, versions in range) and that marshals
// to a file that parses back to the same keys.
func FuzzParseKeyring(f *testing.F) {
	f.Add(freshKeyring(1).marshal())
	f.Add(freshKeyring(7).withKey(9).marshal())
	f.Add([]byte("paddock-keyring 1\nprimary 1\nkey 1 " + key1 + "\n"))
	f.Add([]byte("paddock-keyring 1\r\n# c\r\nkey 2 " + key2 + "\r\nprimary 2"))
	f.Add([]byte("paddock-keyring 1\nprimary 2147483647\nkey 2147483647 " + key1))
	f.Add([]byte("paddock-keyring 1\nprimary\nkey\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		k, err := parseKeyring(data)
		if err != nil {
			return
		}
		checkKeyring(t, k)
		again, err := parseKeyring(k.marshal())
		if err != nil || again.primary != k.primary || !sameKeys(again, k) {
			t.Fatalf("accepted %q, but its marshalled form does not parse back: %v", data, err)
		}
	})
}

// FuzzParseEnvKey: PADDOCK_SECRETS_KEY's parser never panics and accepts only keyrings
// that hold together; its errors never quote the input.
func FuzzParseEnvKey(f *testing.F) {
	f.Add(key1)
	f.Add(" " + key2 + "\n")
	f.Add("paddock-keyring 1\nprimary 1\nkey 1 " + key1)
	f.Add("#\npaddock-keyring 1\nprimary 1\nkey 1 " + key1)
	f.Add("AAAA")
	f.Fuzz(func(t *testing.T, s string) {
		k, err := parseEnvKey(s)
		if err != nil {
			if len(s) >= 24 && bytes.Contains([]byte(err.Error()), []byte(s)) {
				t.Fatalf("the error quotes the input: %v", err)
			}
			return
		}
		checkKeyring(t, k)
	})
}

func checkKeyring(t *testing.T, k *keyring) {
	t.Helper()
	if len(k.keys) == 0 || k.keys[k.primary] == nil || len(k.aeads) != len(k.keys) {
		t.Fatalf("accepted a keyring without its primary: %d of %v", k.primary, k.versions())
	}
	for v, key := range k.keys {
		if v < 1 || v > maxKeyVersion || len(key) != keySize {
			t.Fatalf("accepted version %d with a %d-byte key", v, len(key))
		}
	}
}
