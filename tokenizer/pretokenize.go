package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// Character classes of the GPT-2 pattern
//
//	's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//
// An invalid UTF-8 byte counts as one "other" character, like the U+FFFD it decodes to, so that
// arbitrary bytes pre-tokenize and round-trip.
const (
	clsOther uint8 = iota
	clsLetter
	clsNumber
	clsSpace
)

var asciiClass [utf8.RuneSelf]uint8

func init() {
	for c := 0; c < utf8.RuneSelf; c++ {
		asciiClass[c] = runeClass(rune(c))
	}
}

func runeClass(r rune) uint8 {
	switch {
	case unicode.IsLetter(r):
		return clsLetter
	case unicode.IsNumber(r):
		return clsNumber
	case unicode.IsSpace(r): // the Unicode White_Space set, as \s in Oniguruma
		return clsSpace
	}
	return clsOther
}

// classAt returns the class and byte width of the character starting at s[i].
func classAt(s string, i int) (uint8, int) {
	if c := s[i]; c < utf8.RuneSelf {
		return asciiClass[c], 1
	}
	r, n := utf8.DecodeRuneInString(s[i:])
	if r == utf8.RuneError && n == 1 {
		return clsOther, 1
	}
	return runeClass(r), n
}

// isNumberAt reports whether a numeric character (Rust's char::is_numeric: categories Nd, Nl,
// No) starts at s[i], and its width.
func isNumberAt(s string, i int) (bool, int) {
	if c := s[i]; c < utf8.RuneSelf {
		return c >= '0' && c <= '9', 1
	}
	r, n := utf8.DecodeRuneInString(s[i:])
	if r == utf8.RuneError && n == 1 {
		return false, 1
	}
	return unicode.IsNumber(r), n
}

// gpt2WordEnd returns the end of the pre-token that starts at s[i] (i < len(s)), matching the GPT-2
// pattern with leftmost-first alternation and greedy repetition exactly as Hugging Face's ByteLevel
// pre-tokenizer does.
func gpt2WordEnd(s string, i int) int {
	if s[i] == '\'' && i+1 < len(s) {
		switch s[i+1] {
		case 's', 't', 'm', 'd':
			return i + 2
		case 'r', 'v':
			if i+2 < len(s) && s[i+2] == 'e' {
				return i + 3
			}
		case 'l':
			if i+2 < len(s) && s[i+2] == 'l' {
				return i + 3
			}
		}
	}
	cls, n := classAt(s, i)
	j := i + n
	if s[i] == ' ' && j < len(s) {
		// " ?" in front of a letter, number or other run.
		if c1, n1 := classAt(s, j); c1 != clsSpace {
			cls = c1
			j += n1
		}
	}
	if cls != clsSpace {
		return extendClass(s, j, cls)
	}
	// A whitespace run. \s+(?!\S) takes it all at the end of the text and otherwise backtracks by
	// one character, leaving the last one to prefix the next word; a single whitespace character
	// before a non-space falls through to \s+.
	last := i
	for j < len(s) {
		c, w := classAt(s, j)
		if c != clsSpace {
			if last > i {
				return last
			}
			return j
		}
		last = j
		j += w
	}
	return j
}

// digitMode is the Hugging Face Digits pre-tokenizer applied before ByteLevel, if any.
type digitMode uint8

const (
	digitsNone       digitMode = iota // no Digits pre-tokenizer
	digitsIndividual                  // Digits{individual_digits: true}: every digit is its own word
	digitsContiguous                  // Digits{individual_digits: false}: runs of digits are words
)

// preTokenizer is the pre-tokenizer of native tokenizers: an optional Digits step followed by
// ByteLevel. Loaded files outside that subset run the general steps of pipeline.go.
type preTokenizer struct {
	digits         digitMode
	addPrefixSpace bool // ByteLevel add_prefix_space: prepend " " to every piece not starting with one
	useRegex       bool // ByteLevel use_regex: split pieces with the GPT-2 pattern
	keepOffsets    bool // ByteLevel trim_offsets=false; affects only offsets, kept to save it back
}

// pieceEnd returns the end of the Digits piece starting at s[i].
func (p *preTokenizer) pieceEnd(s string, i int) int {
	if p.digits == digitsNone {
		return len(s)
	}
	num, n := isNumberAt(s, i)
	j := i + n
	if num && p.digits == digitsIndividual {
		return j
	}
	for j < len(s) {
		if c := s[j]; c < utf8.RuneSelf { // ASCII fast path: most text between digits
			if (c >= '0' && c <= '9') != num {
				break
			}
			j++
			continue
		}
		isNum, w := isNumberAt(s, j)
		if isNum != num {
			break
		}
		j += w
	}
	return j
}

// forEachWord calls fn for every pre-token of s, a text without added tokens, in order.
func (p *preTokenizer) forEachWord(s string, fn func(word string)) {
	for i := 0; i < len(s); {
		e := p.pieceEnd(s, i)
		piece := s[i:e]
		i = e
		if p.addPrefixSpace && piece[0] != ' ' {
			piece = " " + piece
		}
		if !p.useRegex {
			fn(piece)
			continue
		}
		for j := 0; j < len(piece); {
			k := gpt2WordEnd(piece, j)
			fn(piece[j:k])
			j = k
		}
	}
}
