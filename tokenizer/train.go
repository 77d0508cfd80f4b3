package tokenizer

import (
	"errors"
	"fmt"
	"unicode/utf8"
)

// TrainOptions configures Train. The zero value is not useful: VocabSize is required. Start from
// DefaultTrainOptions, which also turns on IndividualDigits.
type TrainOptions struct {
	// VocabSize is the total number of ids: the added tokens, the 256 byte tokens and the learned
	// merges. Training stops early when no pair is frequent enough.
	VocabSize int
	// IndividualDigits splits every digit into its own pre-token (Hugging Face's Digits
	// pre-tokenizer with individual_digits, saved as a Sequence of Digits and ByteLevel), so
	// numbers are spelled digit by digit. A small model then copies and compares long numbers
	// digit for digit instead of learning thousands of multi-digit tokens.
	IndividualDigits bool
	// MinFrequency is the smallest pair count that is still merged; 0 means 2 (a pair seen once is
	// noise, not structure).
	MinFrequency int
	// ExtraTokens are more added (special) tokens, given ids after the chat tokens.
	ExtraTokens []string
}

// DefaultTrainOptions returns the options the project trains with: individual digits and
// MinFrequency 2.
func DefaultTrainOptions(vocabSize int) TrainOptions {
	return TrainOptions{VocabSize: vocabSize, IndividualDigits: true, MinFrequency: 2}
}

// minVocab is the smallest useful VocabSize for opts: every added token plus every byte.
func (o TrainOptions) minVocab() int { return len(chatSpecials) + len(o.ExtraTokens) + 256 }

// Validate reports options Train cannot honour.
func (o TrainOptions) Validate() error {
	var errs []error
	if o.VocabSize < o.minVocab() {
		errs = append(errs, fmt.Errorf("VocabSize %d is below %d (the added tokens plus 256 bytes)", o.VocabSize, o.minVocab()))
	}
	if o.VocabSize > 1<<24 {
		errs = append(errs, fmt.Errorf("VocabSize %d exceeds %d", o.VocabSize, 1<<24))
	}
	if o.MinFrequency < 0 {
		errs = append(errs, fmt.Errorf("MinFrequency %d is negative", o.MinFrequency))
	}
	seen := map[string]bool{}
	for _, s := range chatSpecials {
		seen[s.content] = true
	}
	for _, tok := range o.ExtraTokens {
		switch r, n := utf8.DecodeRuneInString(tok); {
		case tok == "" || !utf8.ValidString(tok):
			errs = append(errs, fmt.Errorf("extra token %q is empty or not UTF-8", tok))
		case n == len(tok) && isByteLevelRune(r):
			errs = append(errs, fmt.Errorf("extra token %q would collide with a byte token", tok))
		case seen[tok]:
			errs = append(errs, fmt.Errorf("extra token %q is given twice or is a chat token", tok))
		}
		seen[tok] = true
	}
	if len(errs) > 0 {
		return fmt.Errorf("tokenizer: invalid TrainOptions: %w", errors.Join(errs...))
	}
	return nil
}

func isByteLevelRune(r rune) bool {
	_, ok := runeToByte[r]
	return ok
}

// Train learns a byte-level BPE tokenizer from corpus.
//
// Ids: the chat tokens (EndOfText, ImStart, ImEnd, ToolCallOpen, ToolCallClose, ToolResponseOpen,
// ToolResponseClose) are 0..6, then ExtraTokens, then byte b is id k+b (k added tokens), then
// merged tokens in the order they were learned. Added tokens written in the corpus are cut out
// before counting, as Encode does. Each round merges the most frequent adjacent pair; ties go to
// the smallest (left id, right id), so the result depends only on corpus and opts.
func Train(corpus []string, opts TrainOptions) (*Tokenizer, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.MinFrequency == 0 {
		opts.MinFrequency = 2
	}
	added := make([]addedToken, 0, len(chatSpecials)+len(opts.ExtraTokens))
	for _, s := range chatSpecials {
		added = append(added, addedToken{id: int32(len(added)), content: s.content, special: s.special})
	}
	for _, tok := range opts.ExtraTokens {
		added = append(added, addedToken{id: int32(len(added)), content: tok, special: true})
	}
	pre := preTokenizer{useRegex: true}
	if opts.IndividualDigits {
		pre.digits = digitsIndividual
	}

	tr := newTrainer(added)
	tr.countWords(corpus, pre, newAddedMatcher(added))
	tr.learn(opts.VocabSize, int64(opts.MinFrequency))

	vocab := make(map[string]int32, len(tr.raw))
	for _, a := range added {
		vocab[a.content] = a.id
	}
	for id := len(added); id < len(tr.raw); id++ {
		vocab[byteLevelString(tr.raw[id])] = int32(id)
	}
	merges := make([][2]string, len(tr.merges))
	for i, m := range tr.merges {
		merges[i] = [2]string{byteLevelString(tr.raw[m[0]]), byteLevelString(tr.raw[m[1]])}
	}
	return build(modelSpec{
		vocab:  vocab,
		merges: merges,
		added:  added,
		pre:    pre,
		config: defaultChatConfig(),
	})
}
