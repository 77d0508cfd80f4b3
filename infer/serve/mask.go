package serve

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/agentrl/agentrl/infer/local"
	"github.com/agentrl/agentrl/tokenizer"
)

// vocabIndex is the tokenizer's vocabulary as the token mask reads it: every token that is not
// an added token, by the bytes it decodes to, sorted, so that tokens sharing a prefix are walked
// once for it (a trie walked in order, without building the trie).
type vocabIndex struct {
	pieces []string  // distinct pieces, sorted
	ids    [][]int32 // the tokens of each piece
	lcp    []int     // bytes each piece shares with the one before
	byID   []string  // each token's piece ("" for added tokens)
	maxLen int

	// Inside a JSON string nearly every token fits, and walking them all through the automaton
	// costs a frame per byte. What a token does inside a string depends only on the string's
	// own state (after an escape, in a UTF-8 sequence, …), so the tokens that stay inside it
	// are computed once per such state; only the tokens holding a quote, which may close the
	// string, are walked through the whole automaton.
	quoted *vocabIndex // the pieces that hold a '"'
	mu     sync.Mutex
	inside map[stringState][]int32
}

// stringState is the state of a string frame apart from what follows the string.
type stringState struct {
	phase, pos int
	cont       int8
}

func newVocabIndex(tok *tokenizer.Tokenizer) *vocabIndex {
	byID := make([]string, tok.VocabSize())
	special := map[int32]bool{}
	for _, a := range tok.AddedTokens() {
		if id, ok := tok.SpecialID(a); ok {
			special[id] = true
		}
	}
	for id := range int32(tok.VocabSize()) {
		if _, ok := tok.TokenString(id); ok && !special[id] {
			byID[id] = tok.Decode([]int32{id})
		}
	}
	return indexPieces(byID)
}

// indexPieces indexes the pieces of a vocabulary, by id ("" for a token the mask never allows
// by its text: added tokens, unused ids).
func indexPieces(byID []string) *vocabIndex {
	v := sortPieces(byID)
	quoted := make([]string, len(byID))
	for id, p := range byID {
		if strings.IndexByte(p, '"') >= 0 {
			quoted[id] = p
		}
	}
	v.quoted = sortPieces(quoted)
	v.inside = map[stringState][]int32{}
	return v
}

func sortPieces(byID []string) *vocabIndex {
	v := &vocabIndex{byID: byID}
	byPiece := map[string][]int32{}
	for id, p := range byID {
		if p != "" {
			byPiece[p] = append(byPiece[p], int32(id))
		}
	}
	for p := range byPiece {
		v.pieces = append(v.pieces, p)
	}
	sort.Strings(v.pieces)
	v.ids = make([][]int32, len(v.pieces))
	v.lcp = make([]int, len(v.pieces))
	for i, p := range v.pieces {
		v.ids[i] = byPiece[p]
		v.maxLen = max(v.maxLen, len(p))
		if i > 0 {
			q := v.pieces[i-1]
			n := 0
			for n < len(p) && n < len(q) && p[n] == q[n] {
				n++
			}
			v.lcp[i] = n
		}
	}
	return v
}

// vocab returns the server's vocabulary index, built on first use.
func (s *Server) vocab() *vocabIndex {
	s.vocabOnce.Do(func() {
		v := newVocabIndex(s.tok)
		// The plain inside of a string, computed here on the request's goroutine rather than
		// on the engine's decode path (the rarer string states are computed when first met).
		v.insideString(stringState{}, make([]*frame, v.maxLen+1))
		s.vocabIdx = v
	})
	return s.vocabIdx
}

// grammarConstraint holds one generation to a grammar (local.Constraint).
type grammarConstraint struct {
	v      *vocabIndex
	state  *frame
	stops  []int32
	states []*frame // scratch: the state after each byte of the piece being walked
}

func newConstraint(v *vocabIndex, start *frame, stops []int32) *grammarConstraint {
	return &grammarConstraint{v: v, state: start, stops: stops, states: make([]*frame, v.maxLen+1)}
}

// Allow marks the tokens whose bytes the grammar can read from the current state, the added
// token it expects (a tool-call tag), and the stop tokens once the text may end.
func (g *grammarConstraint) Allow(allowed []bool) error {
	if _, ok := step(g.state, end); ok {
		for _, id := range g.stops {
			allowed[id] = true
		}
	}
	if g.state == nil {
		return nil
	}
	if g.state.kind == fSpecial {
		allowed[g.state.id] = true
		return nil
	}
	if f := g.state; f.kind == fString {
		for _, id := range g.v.insideString(stringState{f.phase, f.pos, f.cont}, g.states) {
			allowed[id] = true
		}
		g.walk(g.v.quoted, allowed)
		return nil
	}
	g.walk(g.v, allowed)
	return nil
}

// walk marks the pieces of v the grammar can read from the current state.
func (g *grammarConstraint) walk(v *vocabIndex, allowed []bool) {
	walkPieces(v, g.state, g.states, func(i int) {
		for _, id := range v.ids[i] {
			allowed[id] = true
		}
	})
}

// walkPieces calls take(i) for every piece of v that can be read from start, walking the sorted
// pieces so that a shared prefix is read once and a refused prefix skips every piece under it.
// A nil state read from a frame of kind fReject counts as refused.
func walkPieces(v *vocabIndex, start *frame, states []*frame, take func(int)) {
	states[0] = start
	depth, dead := 0, -1 // states[0..depth] hold the previous piece's prefix; it died reading byte dead
	for i, p := range v.pieces {
		l := v.lcp[i]
		if dead >= 0 && l > dead {
			continue // shares the prefix that was refused
		}
		dead = -1
		k := min(depth, l)
		for ; k < len(p); k++ {
			st, ok := step(states[k], int(p[k]))
			if !ok || (st != nil && st.kind == fReject) {
				dead = k
				break
			}
			states[k+1] = st
		}
		depth = k
		if dead < 0 {
			take(i)
		}
	}
}

// insideString is the tokens whose text a string in state st reads without closing.
func (v *vocabIndex) insideString(st stringState, scratch []*frame) []int32 {
	v.mu.Lock()
	defer v.mu.Unlock()
	if ids, ok := v.inside[st]; ok {
		return ids
	}
	start := &frame{kind: fString, phase: st.phase, pos: st.pos, cont: st.cont, parent: &frame{kind: fReject}}
	var ids []int32
	walkPieces(v, start, scratch, func(i int) { ids = append(ids, v.ids[i]...) })
	v.inside[st] = ids
	return ids
}

// Advance reads the token drawn.
func (g *grammarConstraint) Advance(tok int32) error {
	if slices.Contains(g.stops, tok) {
		g.state = nil
		return nil
	}
	if g.state != nil && g.state.kind == fSpecial {
		if tok != g.state.id {
			return fmt.Errorf("token %d where the grammar expects token %d", tok, g.state.id)
		}
		g.state = resume(g.state.parent, -1)
		return nil
	}
	if int(tok) >= len(g.v.byID) || g.v.byID[tok] == "" {
		return fmt.Errorf("token %d is not text the grammar can read", tok)
	}
	st, ok := feedText(g.state, g.v.byID[tok])
	if !ok {
		return fmt.Errorf("token %d (%q) does not follow the grammar", tok, g.v.byID[tok])
	}
	g.state = st
	return nil
}

var _ local.Constraint = (*grammarConstraint)(nil)

// toolCallGrammar is the grammar of one call of one of tools (or of the one named force): the
// Hermes form the model writes, <tool_call>{"name":NAME,"arguments":ARGS}</tool_call>.
func (s *Server) toolCallGrammar(ts *toolSet) (*frame, error) {
	tg := &toolGrammar{}
	for i, t := range ts.tools {
		if ts.force != "required" && t.name != ts.force {
			continue
		}
		n, err := compileSchema(t.schema, fmt.Sprintf("tools[%d].function.parameters", i))
		if err != nil {
			return nil, err
		}
		if n.types&tObject == 0 || n.enum != nil {
			return nil, unsupported(fmt.Sprintf("tools[%d].function.parameters", i), "a tool's parameters must be an object schema")
		}
		n.types = tObject
		name, _ := compactJSON(mustMarshal(t.name))
		tg.names = append(tg.names, name)
		tg.schemas = append(tg.schemas, n)
	}
	tg.open, tg.close = s.tagFrame(tokenizer.ToolCallOpen), s.tagFrame(tokenizer.ToolCallClose)
	return toolCallStart(tg), nil
}

// tagFrame reads tag as the added token it is in this tokenizer, or as text.
func (s *Server) tagFrame(tag string) *frame {
	if id, ok := s.tok.SpecialID(tag); ok {
		return &frame{kind: fSpecial, id: id}
	}
	return &frame{kind: fLit, text: tag}
}

// responseFormat reads response_format: nil for text, else the grammar of the JSON asked for.
func responseFormat(raw []byte, param string) (*frame, error) {
	if len(raw) == 0 || isNull(raw) {
		return nil, nil
	}
	var rf struct {
		Type       string `json:"type"`
		JSONSchema *struct {
			Raw json.RawMessage `json:"schema"`
		} `json:"json_schema"`
		Schema json.RawMessage `json:"schema"` // the Responses API's text.format
	}
	if err := json.Unmarshal(raw, &rf); err != nil {
		return nil, badRequest(param, "%s must be an object with a type", param)
	}
	switch rf.Type {
	case "text":
		return nil, nil
	case "json_object":
		return valueFrame(&schemaNode{types: tObject}, nil), nil
	case "json_schema":
		schema := rf.Schema
		if rf.JSONSchema != nil {
			schema = rf.JSONSchema.Raw
		}
		if len(schema) == 0 || isNull(schema) {
			return nil, badRequest(param, "a json_schema format needs its schema")
		}
		n, err := compileSchema(schema, param)
		if err != nil {
			return nil, err
		}
		return valueFrame(n, nil), nil
	}
	return nil, unsupported(param, "%s type must be text, json_object or json_schema, got %q", param, rf.Type)
}
