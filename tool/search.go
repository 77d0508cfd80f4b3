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

// Call implements Tool.
func (s *Search) Call(ctx context.Context, args json.RawMessage) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", fmt.Errorf("search: %w", err)
	}
	a, err := s.parse(args)
	if err != nil {
		return "", err
	}
	hits := s.ix.Search(a.Query, *a.K)
	if len(hits) == 0 {
		return "no results", nil
	}
	var b strings.Builder
	for i, h := range hits {
		if i > 0 {
			b.WriteByte('\n')
		}
		d := s.ix.Doc(h.Doc)
		b.WriteString(oneLine(d.Title))
		b.WriteString(": ")
		b.WriteString(Trim(oneLine(d.Text), s.opt.SnippetChars))
	}
	return b.String(), nil
}

// parse validates the arguments strictly: unknown fields, a missing or empty query, a k out of
// range and trailing data are all errors the model can read and correct.
func (s *Search) parse(raw json.RawMessage) (searchArgs, error) {
	var a searchArgs
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&a); err != nil {
		return a, fmt.Errorf(`search: arguments must be {"query": text, "k": integer}: %w`, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return a, errors.New("search: unexpected data after the arguments object")
	}
	q := strings.TrimSpace(a.Query)
	switch {
	case q == "":
		return a, errors.New("search: query is empty")
	case utf8.RuneCountInString(q) > s.opt.MaxQueryChars:
		return a, fmt.Errorf("search: query longer than %d characters", s.opt.MaxQueryChars)
	}
	a.Query = q
	if a.K == nil {
		k := s.opt.DefaultK
		a.K = &k
	}
	if *a.K < 1 || *a.K > s.opt.MaxK {
		return a, fmt.Errorf("search: k must be between 1 and %d, got %d", s.opt.MaxK, *a.K)
	}
	return a, nil
}

// oneLine folds line breaks and runs of spaces so each result stays on its own line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
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
