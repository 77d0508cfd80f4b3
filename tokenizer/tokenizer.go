package tokenizer

import (
	"encoding/json"
	"fmt"
	"sort"
	"sync"
	"unicode/utf8"
)

// Tokenizer is a byte-level BPE tokenizer with added tokens for the chat format. It is immutable
// after Train or Load and safe for concurrent use.
type Tokenizer struct {
	// The BPE model.
	vocab        map[string]int32  // byte-level spelling -> id (the model vocabulary)
	merges       map[uint64]uint64 // pairKey(a, b) -> rank<<32 | merged id
	mergeList    [][2]string       // merges in rank order, byte-level spellings, for Save
	byteID       [256]int32        // id of each single byte, -1 if the vocabulary lacks it
	unkToken     string            // "" when the model has none
	unkID        int32             // -1 when the model has none
	fuseUnk      bool
	ignoreMerges bool

	// Ids.
	size      int      // largest id + 1
	idToToken []string // spelling of each id as tokenizer.json writes it; "" for an unused id
	decoded   []string // raw bytes each id decodes to
	used      []bool   // whether an id is assigned
	special   []bool   // whether an id is an added token marked special

	// Added tokens.
	added    []addedToken
	addedID  map[string]int32
	matchers []*addedMatcher // non-normalized tokens first, then normalized ones; empty groups left out

	pre           preTokenizer
	postProcessor json.RawMessage // kept verbatim from a loaded file, for Save
	config        chatConfig
	imEnd         int32 // -1 without the ChatML tokens

	// native is a tokenizer of the subset Train produces (byte-level BPE, ByteLevel pre-tokenizer
	// with optional Digits, no normalizer, ChatML tokens): it encodes with pre and Save renders
	// it. Any other loaded tokenizer.json runs the general pipeline below and Save copies its
	// files verbatim.
	native       bool
	norm         normalizer // nil: none
	steps        []preStep
	byteLevel    bool // model symbols are bytes (a ByteLevel pre-tokenizer); otherwise characters
	byteFallback bool
	fallbackID   [256]int32 // <0xNN> tokens, -1 where missing
	decodeTable  bool       // Decode concatenates decoded[id] (the ByteLevel decoder)
	dec          decoderStep
	template     specialsTemplate // ids added with special tokens (the post-processor)
	sources      map[string][]byte

	cache   *wordCache
	scratch sync.Pool // *scratch
}

// modelSpec is everything a Tokenizer is built from, whether trained or loaded.
type modelSpec struct {
	vocab         map[string]int32
	merges        [][2]string
	unkToken      string
	fuseUnk       bool
	ignoreMerges  bool
	added         []addedToken
	pre           preTokenizer
	postProcessor json.RawMessage
	config        chatConfig

	// A loaded tokenizer.json outside the native subset.
	foreign      bool
	norm         normalizer
	steps        []preStep
	byteLevel    bool
	byteFallback bool
	dec          decoderStep
	decodeTable  bool
	template     specialsTemplate
}

// build validates a spec and derives the lookup tables. Its errors name the offending entry.
func build(s modelSpec) (*Tokenizer, error) {
	t := &Tokenizer{
		vocab:         s.vocab,
		merges:        make(map[uint64]uint64, len(s.merges)),
		mergeList:     s.merges,
		unkToken:      s.unkToken,
		unkID:         -1,
		fuseUnk:       s.fuseUnk,
		ignoreMerges:  s.ignoreMerges,
		added:         s.added,
		addedID:       make(map[string]int32, len(s.added)),
		pre:           s.pre,
		postProcessor: s.postProcessor,
		config:        s.config,
		cache:         newWordCache(),
		native:        !s.foreign,
		norm:          s.norm,
		steps:         s.steps,
		byteLevel:     s.byteLevel || !s.foreign,
		byteFallback:  s.byteFallback,
		decodeTable:   s.decodeTable || !s.foreign,
		dec:           s.dec,
		template:      s.template,
	}
	if len(s.vocab) == 0 {
		return nil, fmt.Errorf("tokenizer: empty model vocabulary")
	}
	maxID := int32(-1)
	for tok, id := range s.vocab {
		if id < 0 {
			return nil, fmt.Errorf("tokenizer: vocabulary token %q has negative id %d", tok, id)
		}
		if !utf8.ValidString(tok) || tok == "" {
			return nil, fmt.Errorf("tokenizer: vocabulary token %q (id %d) is empty or not UTF-8", tok, id)
		}
		maxID = max(maxID, id)
	}
	for _, a := range s.added {
		if a.id < 0 {
			return nil, fmt.Errorf("tokenizer: added token %q has negative id %d", a.content, a.id)
		}
		maxID = max(maxID, a.id)
	}
	if maxID >= 1<<28 {
		return nil, fmt.Errorf("tokenizer: id %d is implausibly large", maxID)
	}
	// Tables are indexed by id: a file whose ids are mostly holes would cost memory for nothing.
	if n := len(s.vocab) + len(s.added); int(maxID) >= 2*n+1024 {
		return nil, fmt.Errorf("tokenizer: the largest id %d is far beyond the %d tokens; ids must be dense", maxID, n)
	}
	t.size = int(maxID) + 1
	t.idToToken = make([]string, t.size)
	t.decoded = make([]string, t.size)
	t.used = make([]bool, t.size)
	t.special = make([]bool, t.size)
	for tok, id := range s.vocab {
		if t.used[id] {
			return nil, fmt.Errorf("tokenizer: id %d is used by both %q and %q", id, t.idToToken[id], tok)
		}
		t.used[id] = true
		t.idToToken[id] = tok
		if t.decodeTable { // the ByteLevel decoder maps each character back to its byte
			t.decoded[id], _ = rawFromByteLevel(tok)
		}
	}
	for _, a := range s.added {
		if a.content == "" || !utf8.ValidString(a.content) {
			return nil, fmt.Errorf("tokenizer: added token with id %d is empty or not UTF-8", a.id)
		}
		if prev, dup := t.addedID[a.content]; dup {
			return nil, fmt.Errorf("tokenizer: added token %q appears twice (ids %d and %d)", a.content, prev, a.id)
		}
		if t.used[a.id] && t.idToToken[a.id] != a.content {
			return nil, fmt.Errorf("tokenizer: added token %q has id %d, which the vocabulary gives to %q",
				a.content, a.id, t.idToToken[a.id])
		}
		t.addedID[a.content] = a.id
		t.special[a.id] = a.special
		t.used[a.id] = true
		t.idToToken[a.id] = a.content
		// An added token decodes to its own text, so that Encode and Decode round-trip it.
		t.decoded[a.id] = a.content
	}
	var plain, norm []addedToken
	for _, a := range s.added {
		a.match = a.content
		if a.normalized {
			if t.norm != nil {
				a.match = t.norm.normalize(a.content)
			}
			if a.match == "" {
				return nil, fmt.Errorf("tokenizer: added token %q normalizes to nothing", a.content)
			}
			norm = append(norm, a)
		} else {
			plain = append(plain, a)
		}
	}
	if t.native {
		for _, group := range [][]addedToken{plain, norm} {
			if len(group) > 0 {
				t.matchers = append(t.matchers, newAddedMatcher(group))
			}
		}
	} else {
		// Two fixed levels: the raw text, then the normalized text (either may be empty).
		t.matchers = []*addedMatcher{newAddedMatcher(plain), newAddedMatcher(norm)}
	}
	for b := 0; b < 256; b++ {
		key := string(byteToRune[b])
		if !t.byteLevel {
			key = ""
			if b < utf8.RuneSelf {
				key = string(rune(b))
			}
		}
		id, ok := s.vocab[key]
		if !ok {
			id = -1
		}
		t.byteID[b] = id
		t.fallbackID[b] = -1
		if id, ok := s.vocab[fmt.Sprintf("<0x%02X>", b)]; ok && t.byteFallback {
			t.fallbackID[b] = id
		}
	}
	if s.unkToken != "" {
		id, ok := s.vocab[s.unkToken]
		if !ok {
			return nil, fmt.Errorf("tokenizer: unk_token %q is not in the vocabulary", s.unkToken)
		}
		t.unkID = id
	}
	if err := t.buildMerges(); err != nil {
		return nil, err
	}
	if err := t.checkChat(); err != nil {
		return nil, err
	}
	return t, nil
}

func (t *Tokenizer) buildMerges() error {
	for rank, m := range t.mergeList {
		a, okA := t.vocab[m[0]]
		b, okB := t.vocab[m[1]]
		if !okA || !okB {
			return fmt.Errorf("tokenizer: merge %d (%q %q) uses a token missing from the vocabulary", rank, m[0], m[1])
		}
		id, ok := t.vocab[m[0]+m[1]]
		if !ok {
			return fmt.Errorf("tokenizer: merge %d (%q %q) produces %q, which is missing from the vocabulary",
				rank, m[0], m[1], m[0]+m[1])
		}
		key := pairKey(a, b)
		if prev, dup := t.merges[key]; dup {
			return fmt.Errorf("tokenizer: merge %d (%q %q) repeats merge %d", rank, m[0], m[1], prev>>32)
		}
		t.merges[key] = uint64(rank)<<32 | uint64(uint32(id))
	}
	return nil
}

// checkChat notes whether the ChatML tokens that the chat methods emit exist (a trained
// tokenizer always has them; a native one must), and checks the configuration's bos, eos and pad
// tokens exist.
func (t *Tokenizer) checkChat() error {
	t.imEnd = -1
	if err := t.ChatML(); err != nil {
		if t.native {
			return err
		}
	} else {
		t.imEnd = t.addedID[ImEnd]
	}
	for _, name := range []struct{ field, tok string }{{"bos_token", t.config.bos}, {"eos_token", t.config.eos}, {"pad_token", t.config.pad}} {
		if name.tok == "" {
			continue
		}
		if _, ok := t.tokenID(name.tok); !ok {
			return fmt.Errorf("tokenizer: %s %q is not a token of this tokenizer", name.field, name.tok)
		}
	}
	return nil
}

// tokenID finds an added token or a model token by its spelling.
func (t *Tokenizer) tokenID(tok string) (int32, bool) {
	if id, ok := t.addedID[tok]; ok {
		return id, true
	}
	id, ok := t.vocab[tok]
	return id, ok
}

// VocabSize is the number of ids, the largest id plus one: the size of an embedding table.
func (t *Tokenizer) VocabSize() int { return t.size }

// SpecialID returns the id of an added token (such as ImEnd or ToolCallOpen).
func (t *Tokenizer) SpecialID(tok string) (int32, bool) {
	id, ok := t.addedID[tok]
	return id, ok
}

// AddedTokens lists the added tokens' texts in id order.
func (t *Tokenizer) AddedTokens() []string {
	out := make([]addedToken, len(t.added))
	copy(out, t.added)
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	names := make([]string, len(out))
	for i, a := range out {
		names[i] = a.content
	}
	return names
}

// TokenString returns the spelling of id as tokenizer.json writes it (byte-level for model
// tokens), or false for an id outside the vocabulary.
func (t *Tokenizer) TokenString(id int32) (string, bool) {
	if id < 0 || int(id) >= t.size || !t.used[id] {
		return "", false
	}
	return t.idToToken[id], true
}

// NumMerges is the number of merge rules.
func (t *Tokenizer) NumMerges() int { return len(t.mergeList) }

// isSpecial reports whether id, a valid id, is an added token marked special.
func (t *Tokenizer) isSpecial(id int32) bool { return t.special[id] }

// TokenID returns the id of a token by its spelling as tokenizer.json writes it: an added token
// (such as "<|eot_id|>") or a model token (byte-level spelling, such as "Ġthe", for byte-level
// tokenizers; "▁the" for SentencePiece ones).
func (t *Tokenizer) TokenID(tok string) (int32, bool) { return t.tokenID(tok) }

// SpecialTokens lists the added tokens marked special, in id order.
func (t *Tokenizer) SpecialTokens() []string {
	var out []string
	for _, name := range t.AddedTokens() {
		if id := t.addedID[name]; t.isSpecial(id) {
			out = append(out, name)
		}
	}
	return out
}

// BOS returns tokenizer_config.json's bos_token and its id; ok is false when there is none.
func (t *Tokenizer) BOS() (tok string, id int32, ok bool) { return t.configToken(t.config.bos) }

// EOS returns tokenizer_config.json's eos_token and its id; ok is false when there is none. For a
// native tokenizer it is ImEnd.
func (t *Tokenizer) EOS() (tok string, id int32, ok bool) { return t.configToken(t.config.eos) }

func (t *Tokenizer) configToken(tok string) (string, int32, bool) {
	if tok == "" {
		return "", -1, false
	}
	id, ok := t.tokenID(tok)
	return tok, id, ok
}

// ChatML reports whether the tokenizer has the added tokens ImStart and ImEnd that the built-in
// chat methods (EncodePrompt, EncodeObservation, EncodeFinal, EncodeChat, EndOfTurn) emit. Every
// tokenizer Train builds has them; a loaded Hugging Face tokenizer may not, and then those methods
// return nil (EndOfTurn returns -1): its chat format is its own template's.
func (t *Tokenizer) ChatML() error {
	var missing []string
	for _, tok := range []string{ImStart, ImEnd} {
		if _, ok := t.addedID[tok]; !ok {
			missing = append(missing, tok)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("tokenizer: the ChatML chat format needs added tokens %q, which are missing", missing)
	}
	return nil
}

// Native reports whether the tokenizer is of the subset Train produces (Save renders its files);
// a loaded Hugging Face tokenizer outside it runs the general pipeline and Save copies its files.
func (t *Tokenizer) Native() bool { return t.native }

// SourceFiles returns the files a non-native tokenizer was loaded from (tokenizer.json and, where
// present, tokenizer_config.json, special_tokens_map.json, chat_template.jinja and
// chat_template.json), byte for byte, keyed by file name; nil for a native tokenizer, whose files
// Save renders. The map is a copy.
func (t *Tokenizer) SourceFiles() map[string][]byte {
	if t.sources == nil {
		return nil
	}
	out := make(map[string][]byte, len(t.sources))
	for k, v := range t.sources {
		out[k] = append([]byte(nil), v...)
	}
	return out
}
