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

	// Added tokens.
	added    []addedToken
	addedID  map[string]int32
	matchers []*addedMatcher // non-normalized tokens first, then normalized ones; empty groups left out

	pre           preTokenizer
	postProcessor json.RawMessage // kept verbatim from a loaded file; it never affects Encode
	config        chatConfig
	imEnd         int32

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
	t.size = int(maxID) + 1
	t.idToToken = make([]string, t.size)
	t.decoded = make([]string, t.size)
	t.used = make([]bool, t.size)
	for tok, id := range s.vocab {
		if t.used[id] {
			return nil, fmt.Errorf("tokenizer: id %d is used by both %q and %q", id, t.idToToken[id], tok)
		}
		t.used[id] = true
		t.idToToken[id] = tok
		t.decoded[id], _ = rawFromByteLevel(tok)
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
		t.used[a.id] = true
		t.idToToken[a.id] = a.content
		// An added token decodes to its own text, so that Encode and Decode round-trip it.
		t.decoded[a.id] = a.content
	}
	var plain, norm []addedToken
	for _, a := range s.added {
		if a.normalized {
			norm = append(norm, a)
		} else {
			plain = append(plain, a)
		}
	}
	for _, group := range [][]addedToken{plain, norm} {
		if len(group) > 0 {
			t.matchers = append(t.matchers, newAddedMatcher(group))
		}
	}
	for b := 0; b < 256; b++ {
		id, ok := s.vocab[string(byteToRune[b])]
		if !ok {
			id = -1
		}
		t.byteID[b] = id
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

// checkChat requires the ChatML tokens that the chat methods emit, and checks the configuration's
// eos and pad tokens exist.
func (t *Tokenizer) checkChat() error {
	var missing []string
	for _, tok := range []string{ImStart, ImEnd} {
		if _, ok := t.addedID[tok]; !ok {
			missing = append(missing, tok)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("tokenizer: the chat format needs added tokens %q, which are missing", missing)
	}
	t.imEnd = t.addedID[ImEnd]
	for _, name := range []struct{ field, tok string }{{"eos_token", t.config.eos}, {"pad_token", t.config.pad}} {
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
