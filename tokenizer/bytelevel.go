package tokenizer

import "unicode/utf8"

// The GPT-2 byte-to-unicode alphabet: every byte gets a printable rune so that a token's string in
// tokenizer.json is readable text. Printable Latin-1 bytes map to themselves; the rest (control
// characters, space, and a few others) map to U+0100 onwards in byte order.
var (
	byteToRune [256]rune
	runeToByte = map[rune]byte{}
)

func init() {
	n := 0
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			byteToRune[b] = rune(b)
		} else {
			byteToRune[b] = rune(256 + n)
			n++
		}
		runeToByte[byteToRune[b]] = byte(b)
	}
}

// byteLevelString maps raw bytes to their byte-level form (the spelling used in tokenizer.json).
func byteLevelString(raw string) string {
	buf := make([]byte, 0, 2*len(raw))
	for i := 0; i < len(raw); i++ {
		buf = utf8.AppendRune(buf, byteToRune[raw[i]])
	}
	return string(buf)
}

// rawFromByteLevel inverts byteLevelString. ok is false when s holds a rune outside the alphabet;
// Hugging Face's ByteLevel decoder then emits the token's UTF-8 text unchanged, and so do we.
func rawFromByteLevel(s string) (raw string, ok bool) {
	buf := make([]byte, 0, len(s))
	for _, r := range s {
		b, found := runeToByte[r]
		if !found {
			return s, false
		}
		buf = append(buf, b)
	}
	return string(buf), true
}
