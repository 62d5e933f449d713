package auth

import (
	"errors"
	"strings"
	"testing"

	"github.com/paddockhq/paddock/internal/errdefs"
)

func TestHashAndVerify(t *testing.T) {
	h := HashPassword(goodPassword, cheap)
	if !strings.HasPrefix(h, "$argon2id$v=19$m=64,t=1,p=1$") {
		t.Fatalf("hash %q is not a PHC argon2id string with the given parameters", h)
	}
	if h2 := HashPassword(goodPassword, cheap); h2 == h {
		t.Error("two hashes of one password are equal: the salt is not random")
	}
	stronger := Params{Memory: 256, Time: 3, Threads: 2, SaltLen: 24, KeyLen: 48}
	hs := HashPassword(goodPassword, stronger)
	tampered := h[:len(h)-2] + map[bool]string{true: "AA", false: "BA"}[!strings.HasSuffix(h, "AA")]
	for _, tc := range []struct {
		name    string
		hash    string
		pw      Password
		want    bool
		wantErr bool
	}{
		{"right password", h, goodPassword, true, false},
		{"wrong password", h, "correct horse battery stapler", false, false},
		{"empty password", h, "", false, false},
		{"case differs", h, Password(strings.ToUpper(string(goodPassword))), false, false},
		{"other parameters still verify", hs, goodPassword, true, false},
		{"other parameters, wrong password", hs, "nope nope nope nope", false, false},
		{"tampered key", tampered, goodPassword, false, false},
		{"too long password never matches", h, Password(strings.Repeat("a", MaxPasswordLen+1)), false, false},
		{"malformed hash", "$argon2id$v=19$m=64$x$y", goodPassword, false, true},
		{"bcrypt hash", "$2a$10$abcdefghijklmnopqrstuv", goodPassword, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok, err := VerifyPassword(tc.hash, tc.pw)
			if ok != tc.want || (err != nil) != tc.wantErr {
				t.Errorf("VerifyPassword = %v, %v; want %v, error %v", ok, err, tc.want, tc.wantErr)
			}
		})
	}
	if NeedsRehash(h, cheap) {
		t.Error("NeedsRehash with the same parameters")
	}
	if !NeedsRehash(hs, cheap) || !NeedsRehash(h, DefaultParams) || !NeedsRehash("garbage", cheap) {
		t.Error("NeedsRehash missed changed parameters or a malformed hash")
	}
}

func TestParsePHCRejects(t *testing.T) {
	salt, key := "c2FsdHNhbHRzYWx0c2FsdA", "a2V5a2V5a2V5a2V5a2V5a2V5a2V5a2V5a2V5a2U"
	good := "$argon2id$v=19$m=64,t=1,p=1$" + salt + "$" + key
	if _, err := parsePHC(good); err != nil {
		t.Fatalf("valid string rejected: %v", err)
	}
	for name, s := range map[string]string{
		"empty":            "",
		"argon2i":          "$argon2i$v=19$m=64,t=1,p=1$" + salt + "$" + key,
		"version 16":       "$argon2id$v=16$m=64,t=1,p=1$" + salt + "$" + key,
		"params reordered": "$argon2id$v=19$t=1,m=64,p=1$" + salt + "$" + key,
		"zero threads":     "$argon2id$v=19$m=64,t=1,p=0$" + salt + "$" + key,
		"zero time":        "$argon2id$v=19$m=64,t=0,p=1$" + salt + "$" + key,
		"huge memory":      "$argon2id$v=19$m=4294967295,t=1,p=1$" + salt + "$" + key,
		"memory < 8p":      "$argon2id$v=19$m=8,t=1,p=2$" + salt + "$" + key,
		"leading zero":     "$argon2id$v=19$m=064,t=1,p=1$" + salt + "$" + key,
		"negative":         "$argon2id$v=19$m=-64,t=1,p=1$" + salt + "$" + key,
		"padded salt":      "$argon2id$v=19$m=64,t=1,p=1$" + salt + "==$" + key,
		"short salt":       "$argon2id$v=19$m=64,t=1,p=1$c2FsdA$" + key,
		"short key":        "$argon2id$v=19$m=64,t=1,p=1$" + salt + "$a2V5",
		"extra field":      good + "$x",
		"no leading $":     good[1:],
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := parsePHC(s); !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("parsePHC(%q) = %v, want ErrInvalidArgument", s, err)
			}
		})
	}
}

func TestPasswordPolicy(t *testing.T) {
	for _, tc := range []struct {
		name, user string
		pw         Password
		wantMsg    string // empty: accepted
	}{
		{"good", "alice", goodPassword, ""},
		{"exactly 12", "alice", "plum-kite-47", ""},
		{"11 chars", "alice", "abcdefghijk", "too short"},
		{"12 runes, more bytes", "alice", "ééééééééééé", "too short"},
		{"unicode ok", "alice", "café sur la plage", ""},
		{"too long", "alice", Password(strings.Repeat("x", MaxPasswordLen+1)), "too long"},
		{"max ok", "alice", Password(strings.Repeat("plum kite ", MaxPasswordLen/10) + "four"), ""},
		{"all one character", "alice", "aaaaaaaaaaaa", "repeats"},
		{"a short run repeated", "alice", "abcabcabcabc", "repeats"},
		{"unicode repeated", "alice", "éééééééééééé", "repeats"},
		{"few characters", "alice", "aabbaabbabab", "different characters"},
		{"letters in sequence", "alice", "abcdefghijkl", "sequence"},
		{"digits in sequence", "alice", "123456789012", "sequence"},
		{"descending", "alice", "987654321098", "sequence"},
		{"breached", "alice", "qwertyuiop123", "common and breached"},
		{"breached, any case", "alice", "Password1234", "common"},
		{"a word with digits", "alice", "baseball1987!", "digits or symbols around it"},
		{"a dictionary word", "alice", "constitution", "common"},
		{"equals username", "alice.longname", "alice.longname", "must not be the username"},
		{"equals username ignoring case", "alice.longname", "ALICE.LONGNAME", "must not be the username"},
		{"invalid utf-8", "alice", Password("abcdefghijkl\xff"), "UTF-8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckPasswordPolicy(tc.user, tc.pw)
			if tc.wantMsg == "" {
				if err != nil {
					t.Errorf("rejected: %v", err)
				}
				return
			}
			if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.wantMsg) {
				t.Errorf("err = %v, want ErrInvalidArgument saying %q", err, tc.wantMsg)
			}
			if err != nil && len(tc.pw) > 3 && strings.Contains(err.Error(), string(tc.pw)) {
				t.Errorf("error echoes the password: %v", err)
			}
		})
	}
}

func TestCheckUsername(t *testing.T) {
	for name, ok := range map[string]bool{
		"alice": true, "Alice_2": true, "a.b-c": true, "abc": true, strings.Repeat("a", 32): true,
		"ab": false, strings.Repeat("a", 33): false, "_alice": false, "al ice": false, "alicé": false,
		"al/ice": false, "": false, "alice\x00": false,
	} {
		if err := CheckUsername(name); (err == nil) != ok {
			t.Errorf("CheckUsername(%q) = %v, want ok=%v", name, err, ok)
		}
	}
}

// BenchmarkHashPassword measures DefaultParams: they should take 50-100 ms here.
//
//	go test -run '^$' -bench HashPassword ./internal/auth/
func BenchmarkHashPassword(b *testing.B) {
	for b.Loop() {
		HashPassword(goodPassword, DefaultParams)
	}
}

func BenchmarkVerifyPassword(b *testing.B) {
	h := HashPassword(goodPassword, DefaultParams)
	for b.Loop() {
		if ok, _ := VerifyPassword(h, goodPassword); !ok {
			b.Fatal("no match")
		}
	}
}
