package tokenizer

import "fmt"

// Compatible reports whether b reads and writes token ids exactly as a does: the same ids with
// the same spellings, the same added (special) tokens and the same end of turn. Logprobs of one
// model are meaningful for another's tokens only then (a distillation teacher and its student).
// The error names the first difference.
func Compatible(a, b *Tokenizer) error {
	if a.size != b.size {
		return fmt.Errorf("tokenizer: %d ids against %d", a.size, b.size)
	}
	for id := range a.size {
		sa, oka := a.TokenString(int32(id))
		sb, okb := b.TokenString(int32(id))
		if oka != okb || sa != sb {
			return fmt.Errorf("tokenizer: id %d is %q against %q", id, sa, sb)
		}
	}
	aa, ab := a.AddedTokens(), b.AddedTokens()
	if len(aa) != len(ab) {
		return fmt.Errorf("tokenizer: %d special tokens against %d", len(aa), len(ab))
	}
	for i := range aa {
		if aa[i] != ab[i] {
			return fmt.Errorf("tokenizer: special token %d is %q against %q", i, aa[i], ab[i])
		}
		ia, _ := a.SpecialID(aa[i])
		ib, _ := b.SpecialID(ab[i])
		if ia != ib {
			return fmt.Errorf("tokenizer: special token %q is id %d against %d", aa[i], ia, ib)
		}
	}
	if a.imEnd != b.imEnd {
		return fmt.Errorf("tokenizer: the end of a turn is id %d against %d", a.imEnd, b.imEnd)
	}
	if a.config.eos != b.config.eos || a.config.pad != b.config.pad {
		return fmt.Errorf("tokenizer: eos/pad tokens %q/%q against %q/%q", a.config.eos, a.config.pad, b.config.eos, b.config.pad)
	}
	if a.unkID != b.unkID {
		return fmt.Errorf("tokenizer: the unknown token is id %d against %d", a.unkID, b.unkID)
	}
	return nil
}
