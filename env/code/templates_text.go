package code

import (
	"fmt"
	"math/rand/v2"
	"strings"
)

// randWord is a lowercase word of minLen to maxLen letters.
func randWord(r *rand.Rand, minLen, maxLen int) string {
	b := make([]byte, minLen+r.IntN(maxLen-minLen+1))
	for i := range b {
		b[i] = byte('a' + r.IntN(26))
	}
	return string(b)
}

// randSentence is 0 to maxWords words joined by single spaces.
func randSentence(r *rand.Rand, maxWords, maxLen int) string {
	words := make([]string, r.IntN(maxWords+1))
	for i := range words {
		words[i] = randWord(r, 1, maxLen)
	}
	return strings.Join(words, " ")
}

func str(args []any) string { return args[0].(string) }

func drawEveryKth(r *rand.Rand) instance {
	k := 2 + r.IntN(3)
	pick := func(s string, from int) string {
		var b strings.Builder
		for i := from; i < len(s); i += k {
			b.WriteByte(s[i])
		}
		return b.String()
	}
	return instance{
		text:     fmt.Sprintf("Write def every_kth(s): the characters of string s at positions 0, %d, %d, ... joined into a string.", k, 2*k),
		solution: fmt.Sprintf("def every_kth(s):\n    return s[::%d]\n", k),
		buggy:    fmt.Sprintf("def every_kth(s):\n    return s[1::%d]\n", k),
		solve:    func(a []any) any { return pick(str(a), 0) },
		bug:      func(a []any) any { return pick(str(a), 1) },
		input:    func(r *rand.Rand) []any { return []any{randWord(r, 0, 12)} },
	}
}

func drawRotateLeft(r *rand.Rand) instance {
	k := 1 + r.IntN(3)
	rotate := func(s string, left bool) string {
		if s == "" {
			return s
		}
		n := k % len(s)
		if !left {
			n = (len(s) - n) % len(s)
		}
		return s[n:] + s[:n]
	}
	return instance{
		text:     fmt.Sprintf("Write def rotate_left(s): string s rotated left by %d characters (the first ones move to the end); '' stays ''.", k),
		solution: fmt.Sprintf("def rotate_left(s):\n    if not s:\n        return s\n    k = %d %% len(s)\n    return s[k:] + s[:k]\n", k),
		buggy:    fmt.Sprintf("def rotate_left(s):\n    if not s:\n        return s\n    k = %d %% len(s)\n    return s[-k:] + s[:-k]\n", k),
		solve:    func(a []any) any { return rotate(str(a), true) },
		bug:      func(a []any) any { return rotate(str(a), false) },
		input:    func(r *rand.Rand) []any { return []any{randWord(r, 0, 8)} },
	}
}

func drawShiftLetters(r *rand.Rand) instance {
	k := 1 + r.IntN(5)
	shift := func(s string, wrap bool) string {
		b := []byte(s)
		for i, c := range b {
			if c >= 'a' && c <= 'z' {
				if wrap {
					b[i] = 'a' + (c-'a'+byte(k))%26
				} else {
					b[i] = c + byte(k)
				}
			}
		}
		return string(b)
	}
	return instance{
		text:     fmt.Sprintf("Write def shift_letters(s): replace each lowercase letter of s by the letter %d places later, wrapping from z to a; keep other characters.", k),
		solution: fmt.Sprintf("def shift_letters(s):\n    return ''.join(chr((ord(c) - 97 + %d) %% 26 + 97) if 'a' <= c <= 'z' else c for c in s)\n", k),
		buggy:    fmt.Sprintf("def shift_letters(s):\n    return ''.join(chr(ord(c) + %d) if 'a' <= c <= 'z' else c for c in s)\n", k),
		solve:    func(a []any) any { return shift(str(a), true) },
		bug:      func(a []any) any { return shift(str(a), false) },
		input:    func(r *rand.Rand) []any { return []any{randSentence(r, 3, 6)} },
	}
}

func drawCountVowels(r *rand.Rand) instance {
	count := func(s, set string) int {
		n := 0
		for i := 0; i < len(s); i++ {
			if strings.IndexByte(set, s[i]) >= 0 {
				n++
			}
		}
		return n
	}
	return instance{
		text:     "Write def count_vowels(s): how many characters of s are vowels (a, e, i, o, u).",
		solution: "def count_vowels(s):\n    return sum(1 for c in s if c in 'aeiou')\n",
		buggy:    "def count_vowels(s):\n    return sum(1 for c in s if c in 'aeiouy')\n",
		solve:    func(a []any) any { return count(str(a), "aeiou") },
		bug:      func(a []any) any { return count(str(a), "aeiouy") },
		input:    func(r *rand.Rand) []any { return []any{randSentence(r, 3, 8)} },
	}
}

func drawLongWords(r *rand.Rand) instance {
	k := 2 + r.IntN(4)
	count := func(s string, strict bool) int {
		n := 0
		for _, w := range strings.Fields(s) {
			if len(w) > k || (!strict && len(w) == k) {
				n++
			}
		}
		return n
	}
	return instance{
		text:     fmt.Sprintf("Write def long_words(s): how many words of s (separated by spaces) have more than %d letters.", k),
		solution: fmt.Sprintf("def long_words(s):\n    return sum(1 for w in s.split() if len(w) > %d)\n", k),
		buggy:    fmt.Sprintf("def long_words(s):\n    return sum(1 for w in s.split() if len(w) >= %d)\n", k),
		solve:    func(a []any) any { return count(str(a), true) },
		bug:      func(a []any) any { return count(str(a), false) },
		input:    func(r *rand.Rand) []any { return []any{randSentence(r, 6, 8)} },
	}
}
