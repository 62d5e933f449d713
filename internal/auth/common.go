package auth

import (
	"fmt"
	"strings"
	"sync"
	"unicode"

	"github.com/trustelem/zxcvbn/frequency"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// commonWords is the set of passwords, words and names a password must not be (NIST
// SP 800-63B 5.1.1.2: compare new passwords against values known to be commonly used,
// expected or compromised). It is zxcvbn's lists: 30,000 passwords from breach corpora,
// English words by Wikipedia frequency, words from TV and film, and US census names and
// surnames. Built on first use; entries shorter than 4 characters are left out, as no
// password that short is accepted and an affix rule on them would refuse too much.
var commonWords = sync.OnceValue(func() map[string]struct{} {
	set := make(map[string]struct{}, 100_000)
	for _, list := range []string{"passwords", "english_wikipedia", "us_tv_and_film", "surnames", "female_names", "male_names"} {
		for _, w := range frequency.FrequencyLists[list] {
			if len(w) >= 4 {
				set[w] = struct{}{}
			}
		}
	}
	return set
})

// checkGuessable refuses a password that an online guesser tries early: one on the
// list, one from the list with digits or symbols around it ("Password1234!"), one
// character or a short run repeated ("aaaaaaaaaaaa", "abcabcabcabc"), few distinct
// characters, or a sequence ("123456789012", "abcdefghijkl"). Each error names its rule.
func checkGuessable(s string) error {
	lower := strings.ToLower(s)
	common := commonWords()
	if _, ok := common[lower]; ok {
		return policyError("is on a list of common and breached passwords, words and names")
	}
	core := strings.TrimFunc(lower, func(r rune) bool { return !unicode.IsLetter(r) })
	if _, ok := common[core]; ok && core != "" {
		return policyError("is a common password, word or name with digits or symbols around it")
	}
	if repeated(lower) {
		return policyError("repeats one character or a short run of them")
	}
	if n := distinct(lower); n < 5 {
		return policyError(fmt.Sprintf("uses only %d different characters", n))
	}
	if isSequence(lower) {
		return policyError("is a sequence (like abcdef or 123456)")
	}
	return nil
}

func policyError(rule string) error {
	return fmt.Errorf("password %s: choose another (a few unrelated words work well): %w", rule, errdefs.ErrInvalidArgument)
}

// repeated reports whether s is one string repeated two or more times.
func repeated(s string) bool {
	for n := 1; n <= len(s)/2; n++ {
		if len(s)%n == 0 && strings.Repeat(s[:n], len(s)/n) == s {
			return true
		}
	}
	return false
}

func distinct(s string) int {
	seen := map[rune]bool{}
	for _, r := range s {
		seen[r] = true
	}
	return len(seen)
}

// isSequence reports whether every character follows the one before by the same step
// of +1 or -1 (digits wrap from 9 to 0, and back).
func isSequence(s string) bool {
	rs := []rune(s)
	if len(rs) < 3 {
		return false
	}
	step := func(a, b rune) rune {
		d := b - a
		if unicode.IsDigit(a) && unicode.IsDigit(b) && (d == 9 || d == -9) {
			d = -d / 9
		}
		return d
	}
	first := step(rs[0], rs[1])
	if first != 1 && first != -1 {
		return false
	}
	for i := 2; i < len(rs); i++ {
		if step(rs[i-1], rs[i]) != first {
			return false
		}
	}
	return true
}
