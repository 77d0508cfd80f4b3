package tool

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
)

func newTestSearch(t *testing.T) *Search {
	t.Helper()
	docs := []Doc{
		{Title: "Velora Corp", Text: "Velora Corp was founded by Anu Kessel. It is headquartered in Miravo."},
		{Title: "Anu Kessel", Text: "Anu Kessel was born in Miravo and works for Velora Corp."},
		{Title: "Miravo", Text: "Miravo is a city in Tarnesia.\nIt is famous for its long, long, long, long, long, long, long, long, long, long bridges."},
	}
	ix, err := NewIndex(docs, IndexOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSearch(ix, SearchOptions{SnippetChars: 60})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSearchToolCall(t *testing.T) {
	s := newTestSearch(t)
	cases := []struct {
		name    string
		args    string
		want    string // exact output, when wantErr is empty
		wantErr string // substring of the error
	}{
		{name: "one result", args: `{"query":"Tarnesia","k":1}`,
			want: "Miravo: Miravo is a city in Tarnesia. It is famous for its long,..."},
		{name: "default k", args: `{"query":"velora"}`,
			want: "Velora Corp: Velora Corp was founded by Anu Kessel. It is headquartered...\n" +
				"Anu Kessel: Anu Kessel was born in Miravo and works for Velora Corp."},
		{name: "no results", args: `{"query":"zebra"}`, want: "no results"},
		{name: "empty query", args: `{"query":"  "}`, wantErr: "query is empty"},
		{name: "missing query", args: `{"k":2}`, wantErr: "query is empty"},
		{name: "k zero", args: `{"query":"x","k":0}`, wantErr: "k must be between 1 and 10"},
		{name: "k too large", args: `{"query":"x","k":11}`, wantErr: "k must be between 1 and 10"},
		{name: "k not integer", args: `{"query":"x","k":2.5}`, wantErr: "arguments must be"},
		{name: "k string", args: `{"query":"x","k":"3"}`, wantErr: "arguments must be"},
		{name: "unknown field", args: `{"query":"x","top":3}`, wantErr: "unknown field"},
		{name: "not an object", args: `["x"]`, wantErr: "arguments must be"},
		{name: "trailing data", args: `{"query":"x"} {}`, wantErr: "unexpected data"},
		{name: "empty", args: ``, wantErr: "arguments must be"},
		{name: "query too long", args: `{"query":"` + strings.Repeat("a ", 200) + `"}`, wantErr: "longer than 256"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := s.Call(context.Background(), json.RawMessage(c.args))
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("Call(%s) = %q, %v; want error containing %q", c.args, got, err, c.wantErr)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("Call(%s) = %q, %v\nwant %q", c.args, got, err, c.want)
			}
		})
	}
}

func TestSearchToolContract(t *testing.T) {
	s := newTestSearch(t)
	var _ Tool = s
	if s.Name() != "search" || s.Description() == "" {
		t.Errorf("name %q description %q", s.Name(), s.Description())
	}
	var schema map[string]any
	if err := json.Unmarshal(s.Schema(), &schema); err != nil {
		t.Fatalf("schema is not JSON: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Call(ctx, json.RawMessage(`{"query":"x"}`)); err == nil {
		t.Error("call on a cancelled context succeeded")
	}
	if _, err := NewSearch(nil, SearchOptions{}); err == nil {
		t.Error("NewSearch(nil) succeeded")
	}
	ix, _ := NewIndex(nil, IndexOptions{})
	if _, err := NewSearch(ix, SearchOptions{DefaultK: 5, MaxK: 2}); err == nil {
		t.Error("DefaultK > MaxK accepted")
	}
}

func TestTrim(t *testing.T) {
	cases := []struct {
		s    string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"exactly10!", 10, "exactly10!"},
		{"hello wide world", 12, "hello wide..."},
		{"nospacesatall", 5, "nospa..."},
		{"ünïcödé wörds", 8, "ünïcödé..."},
	}
	for _, c := range cases {
		if got := Trim(c.s, c.n); got != c.want {
			t.Errorf("Trim(%q, %d) = %q, want %q", c.s, c.n, got, c.want)
		}
	}
}

// The plain-form fast path of the argument parser must agree with encoding/json wherever it
// accepts an input.
func FuzzSearchArgs(f *testing.F) {
	for _, s := range []string{
		`{"query":"a"}`, ` {"query" : "a b" , "k" : 3 } `, `{"k":-0,"query":"x"}`, `{"query":"a","k":01}`,
		`{"query":"a","k":1e1}`, `{"query":"a","k":2.0}`, `{"QUERY":"a"}`, `{"query":"a","query":"b"}`,
		`{"query":"\u00e9"}`, "{\"query\":\"\xff\"}", `{"query":null}`, `{"query":"a"} x`, `{"query":"a",}`,
		`{"query":"a","k":1234567890}`, `{}`, `{"query":"tab	in"}`, "{\"query\":\"é ✓\"}\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		q, k, hasK, ok := parseSimpleArgs(raw)
		if !ok {
			return
		}
		jq, jk, jHasK, err := decodeArgs(raw)
		if err != nil || q != jq || k != jk || hasK != jHasK {
			t.Fatalf("%q: fast path gives %q %d %v, encoding/json %q %d %v %v", raw, q, k, hasK, jq, jk, jHasK, err)
		}
	})
}

// oneLine is the plain form of appendOneLine.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// Rendering a snippet into a reused buffer gives exactly Trim(oneLine(text), n).
func FuzzSnippet(f *testing.F) {
	for _, s := range []string{"", "a  b\n c", "Miravo is a city in Tarnesia.\nIt is famous", "  ünï\u00a0code\u2028x  ", "\xffa b\xfe", "abc def ghi"} {
		f.Add(s, 5)
	}
	f.Fuzz(func(t *testing.T, s string, n int) {
		if n < 1 || n > 1000 {
			return
		}
		want := Trim(oneLine(s), n)
		got := appendTrimmed([]byte("x"), appendOneLine(nil, s), n)
		if string(got[1:]) != want || string(got[:1]) != "x" {
			t.Fatalf("Trim(oneLine(%q), %d) = %q, rendered %q", s, n, want, got[1:])
		}
	})
}
