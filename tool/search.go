package tool

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// SearchOptions configure the search tool. Zero fields take the defaults noted.
type SearchOptions struct {
	Name          string // tool name the model writes; default "search"
	Description   string // default describes the arguments briefly
	DefaultK      int    // results when k is omitted; default 3
	MaxK          int    // largest k accepted; default 10
	SnippetChars  int    // text shown per result before trimming; default 160
	MaxQueryChars int    // longest query accepted; default 256
}

func (o *SearchOptions) fill() {
	if o.Name == "" {
		o.Name = "search"
	}
	if o.DefaultK == 0 {
		o.DefaultK = 3
	}
	if o.MaxK == 0 {
		o.MaxK = 10
	}
	if o.SnippetChars == 0 {
		o.SnippetChars = 160
	}
	if o.MaxQueryChars == 0 {
		o.MaxQueryChars = 256
	}
	if o.Description == "" {
		o.Description = fmt.Sprintf("find documents; k results, 1-%d, default %d", o.MaxK, o.DefaultK)
	}
}

// Search is the BM25 search tool: it answers {"query": "...", "k": 3} with the top-k documents,
// one per line as "Title: snippet", best first. It holds a read-only Index, so one Search may be
// shared by any number of environments and goroutines.
type Search struct {
	ix  *Index
	opt SearchOptions
}

// NewSearch returns the search tool over ix.
func NewSearch(ix *Index, opt SearchOptions) (*Search, error) {
	if ix == nil {
		return nil, errors.New("search tool: nil index")
	}
	opt.fill()
	if opt.DefaultK < 1 || opt.MaxK < opt.DefaultK {
		return nil, fmt.Errorf("search tool: need 1 <= DefaultK (%d) <= MaxK (%d)", opt.DefaultK, opt.MaxK)
	}
	if opt.SnippetChars < 1 || opt.MaxQueryChars < 1 {
		return nil, fmt.Errorf("search tool: SnippetChars (%d) and MaxQueryChars (%d) must be positive", opt.SnippetChars, opt.MaxQueryChars)
	}
	return &Search{ix: ix, opt: opt}, nil
}

// Name implements Tool.
func (s *Search) Name() string { return s.opt.Name }

// Description implements Tool.
func (s *Search) Description() string { return s.opt.Description }

// Schema implements Tool.
func (s *Search) Schema() json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"type":"object","properties":{"query":{"type":"string","maxLength":%d},`+
		`"k":{"type":"integer","minimum":1,"maximum":%d}},"required":["query"],"additionalProperties":false}`,
		s.opt.MaxQueryChars, s.opt.MaxK))
}

// searchArgs is the arguments object; K is a pointer to tell "absent" from 0.
type searchArgs struct {
	Query string `json:"query"`
	K     *int   `json:"k"`
}

// decodeArgs reads the arguments with encoding/json: any form the model may write, and the
// wording of the error when they are malformed.
func decodeArgs(raw json.RawMessage) (query string, k int, hasK bool, err error) {
	var a searchArgs
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&a); err != nil {
		return "", 0, false, fmt.Errorf(`search: arguments must be {"query": text, "k": integer}: %w`, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return "", 0, false, errors.New("search: unexpected data after the arguments object")
	}
	if a.K != nil {
		return a.Query, *a.K, true, nil
	}
	return a.Query, 0, false, nil
}

// Call implements Tool.
func (s *Search) Call(ctx context.Context, args json.RawMessage) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", fmt.Errorf("search: %w", err)
	}
	query, k, err := s.parse(args)
	if err != nil {
		return "", err
	}
	sc := s.ix.scratch.Get().(*queryScratch)
	defer s.ix.scratch.Put(sc)
	hits := s.ix.search(sc, query, k)
	if len(hits) == 0 {
		return "no results", nil
	}
	// Rendered in the query's scratch: the answer string is the call's one allocation.
	out := sc.out[:0]
	for i, h := range hits {
		if i > 0 {
			out = append(out, '\n')
		}
		d := s.ix.Doc(h.Doc)
		out = appendOneLine(out, d.Title)
		out = append(out, ": "...)
		sc.line = appendOneLine(sc.line[:0], d.Text)
		out = appendTrimmed(out, sc.line, s.opt.SnippetChars)
	}
	sc.out = out
	return string(out), nil
}

// parse validates the arguments strictly: unknown fields, a missing or empty query, a k out of
// range and trailing data are all errors the model can read and correct. It returns the trimmed
// query and k.
func (s *Search) parse(raw json.RawMessage) (query string, k int, err error) {
	query, k, hasK, ok := parseSimpleArgs(raw)
	if !ok {
		if query, k, hasK, err = decodeArgs(raw); err != nil {
			return "", 0, err
		}
	}
	q := strings.TrimSpace(query)
	switch {
	case q == "":
		return "", 0, errors.New("search: query is empty")
	case utf8.RuneCountInString(q) > s.opt.MaxQueryChars:
		return "", 0, fmt.Errorf("search: query longer than %d characters", s.opt.MaxQueryChars)
	}
	if !hasK {
		k = s.opt.DefaultK
	}
	if k < 1 || k > s.opt.MaxK {
		return "", 0, fmt.Errorf("search: k must be between 1 and %d, got %d", s.opt.MaxK, k)
	}
	return q, k, nil
}

// appendOneLine appends s to dst with line breaks and runs of spaces folded into single spaces
// (strings.Join(strings.Fields(s), " ")), so each result stays on its own line.
func appendOneLine(dst []byte, s string) []byte {
	first := true
	for f := range strings.FieldsSeq(s) {
		if !first {
			dst = append(dst, ' ')
		}
		dst = append(dst, f...)
		first = false
	}
	return dst
}

// appendTrimmed appends Trim(string(s), n) to dst.
func appendTrimmed(dst, s []byte, n int) []byte {
	if utf8.RuneCount(s) <= n {
		return append(dst, s...)
	}
	cut := 0
	for i := 0; i < len(s); {
		if cut == n {
			s = s[:i]
			break
		}
		_, size := utf8.DecodeRune(s[i:])
		i += size
		cut++
	}
	if sp := bytes.LastIndexByte(s, ' '); sp > 0 {
		s = s[:sp]
	}
	dst = append(dst, s...)
	return append(dst, "..."...)
}

// Trim shortens s to at most n runes, cutting at the last space when there is one and marking the
// cut with "...".
func Trim(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	cut := 0
	for i := range s {
		if cut == n {
			s = s[:i]
			break
		}
		cut++
	}
	if sp := strings.LastIndexByte(s, ' '); sp > 0 {
		s = s[:sp]
	}
	return s + "..."
}
