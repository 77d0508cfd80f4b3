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
