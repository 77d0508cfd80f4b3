package tool

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestCallFormatByName(t *testing.T) {
	for _, n := range []string{"hermes", "llama3", "mistral"} {
		f, err := CallFormatByName(n)
		if err != nil || f.Name() != n {
			t.Fatalf("%s: %v %v", n, f, err)
		}
	}
	_, err := CallFormatByName("xml")
	if err == nil || !strings.Contains(err.Error(), "hermes, llama3, mistral") {
		t.Fatalf("unknown name: %v", err)
	}
}

// TestHermesIsParseCalls: the Hermes format is today's parser, call for call.
func TestHermesIsParseCalls(t *testing.T) {
	for _, text := range []string{
		`<tool_call>{"name": "calculator", "arguments": {"expression": "1+1"}}</tool_call>`,
		"thinking\n<tool_call>\n{\"name\": \"a\", \"arguments\": \"{\\\"x\\\": 1}\"}\n</tool_call>",
		`<tool_call>{"name": 3}</tool_call></tool_call><tool_call>`,
		"no call here",
	} {
		got := Hermes.Parse(text, ParseLimits{})
		want := ParseCalls(text, ParseLimits{})
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: %+v != %+v", text, got, want)
		}
		if Hermes.HasCall(text) != HasCall(text) {
			t.Fatalf("%q: HasCall differs", text)
		}
	}
}

func TestCallFormatsParse(t *testing.T) {
	type want struct {
		name, args, id string
		err            error
	}
	for _, c := range []struct {
		f       CallFormat
		text    string
		content string
		calls   []want
	}{
		{Hermes, "Let me add.\n<tool_call>\n{\"name\": \"calc\", \"arguments\": {\"e\": \"1+1\"}}\n</tool_call>", "Let me add.", []want{{"calc", `{"e": "1+1"}`, "", nil}}},
		{Hermes, "<tool_call>{\"name\": \"calc\", \"arguments\": [1]}</tool_call>", "", []want{{"calc", "", "", ErrArgsNotObject}}},
		{Llama3JSON, `{"name": "calc", "parameters": {"e": "1+1"}}`, "", []want{{"calc", `{"e": "1+1"}`, "", nil}}},
		{Llama3JSON, "<|python_tag|>{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"arguments\": {\"k\": 2}}", "", []want{{"a", `{}`, "", nil}, {"b", `{"k": 2}`, "", nil}}},
		{Llama3JSON, `{"name": "calc", "parameters": {"e": `, "", []want{{"", "", "", ErrBadJSON}}},
		{Llama3JSON, `{"name": "calc", "parameters": {}} and more`, "", []want{{"calc", "{}", "", nil}, {"", "", "", ErrBadJSON}}},
		{Llama3JSON, `{"name": "calc", "parameters": "7"}`, "", []want{{"calc", "", "", ErrArgsNotObject}}},
		{Llama3JSON, `The answer is 4.`, "The answer is 4.", nil},
		{Mistral, `Sure. [TOOL_CALLS] [{"name": "calc", "arguments": {"e": "2"}, "id": "abcdefghi"}]`, "Sure.", []want{{"calc", `{"e": "2"}`, "abcdefghi", nil}}},
		{Mistral, `[TOOL_CALLS] {"name": "calc"}`, "", []want{{"", "", "", ErrBadJSON}}},
		{Mistral, `[TOOL_CALLS] [{"arguments": {}}, {"name": "x", "arguments": {}}]`, "", []want{{"", "", "", ErrNoName}, {"x", "{}", "", nil}}},
		{Mistral, `[TOOL_CALLS] []`, "", []want{{"", "", "", ErrNoName}}},
	} {
		calls := c.f.Parse(c.text, ParseLimits{})
		if len(calls) != len(c.calls) {
			t.Fatalf("%s %q: %d calls %+v, want %d", c.f.Name(), c.text, len(calls), calls, len(c.calls))
		}
		for i, w := range c.calls {
			g := calls[i]
			if w.err != nil {
				if !errors.Is(g.Err, w.err) {
					t.Fatalf("%s %q call %d: err %v, want %v", c.f.Name(), c.text, i, g.Err, w.err)
				}
				continue
			}
			if g.Err != nil || g.Name != w.name || string(g.Arguments) != w.args || g.ID != w.id {
				t.Fatalf("%s %q call %d: %+v, want %+v", c.f.Name(), c.text, i, g, w)
			}
		}
		if got := c.f.Content(c.text); got != c.content {
			t.Fatalf("%s %q: content %q, want %q", c.f.Name(), c.text, got, c.content)
		}
	}
}

func TestCallFormatsLimits(t *testing.T) {
	big := `{"name": "x", "parameters": {"s": "` + strings.Repeat("a", 100) + `"}}`
	for _, f := range []CallFormat{Hermes, Llama3JSON, Mistral} {
		text, err := f.Render([]Call{{Name: "x", Arguments: json.RawMessage(`{"s": "` + strings.Repeat("a", 100) + `"}`)}})
		if err != nil {
			t.Fatal(err)
		}
		calls := f.Parse(text, ParseLimits{MaxArgBytes: 50})
		if len(calls) != 1 || !errors.Is(calls[0].Err, ErrArgsTooLarge) {
			t.Fatalf("%s: %+v", f.Name(), calls)
		}
		many := make([]Call, 6)
		for i := range many {
			many[i] = Call{Name: "x", Arguments: json.RawMessage(`{}`)}
		}
		text, _ = f.Render(many)
		calls = f.Parse(text, ParseLimits{MaxCalls: 2})
		if len(calls) != 3 || !errors.Is(calls[2].Err, ErrTooManyCalls) {
			t.Fatalf("%s: %d calls %+v", f.Name(), len(calls), calls)
		}
	}
	_ = big
}

// TestCallFormatsRoundTrip: what Render writes, Parse reads back.
func TestCallFormatsRoundTrip(t *testing.T) {
	calls := []Call{
		{ID: "abcdefghi", Name: "search", Arguments: json.RawMessage(`{"query":"日本 \"x\"\n","k":3,"opts":{"b":[1,2.5,true,null]}}`)},
		{ID: "jklmnopqr", Name: "calc", Arguments: json.RawMessage(`{}`)},
	}
	wantHermes := "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"query\": \"日本 \\\"x\\\"\\n\", \"k\": 3, \"opts\": {\"b\": [1, 2.5, true, null]}}}\n</tool_call>\n<tool_call>\n{\"name\": \"calc\", \"arguments\": {}}\n</tool_call>"
	for _, f := range []CallFormat{Hermes, Llama3JSON, Mistral} {
		text, err := f.Render(calls)
		if err != nil {
			t.Fatal(err)
		}
		if f == Hermes && text != wantHermes {
			t.Fatalf("hermes render %q", text)
		}
		got := f.Parse(text, ParseLimits{})
		if len(got) != 2 {
			t.Fatalf("%s: %q parsed to %+v", f.Name(), text, got)
		}
		for i, g := range got {
			if g.Err != nil || g.Name != calls[i].Name {
				t.Fatalf("%s: %+v", f.Name(), g)
			}
			a, _ := pyJSON(g.Arguments)
			b, _ := pyJSON(calls[i].Arguments)
			if a != b {
				t.Fatalf("%s: args %s != %s", f.Name(), a, b)
			}
			if f == Mistral && g.ID != calls[i].ID {
				t.Fatalf("mistral id %q", g.ID)
			}
		}
	}
}

// FuzzCallFormats: no input makes a parser panic, every attempt is a call or an error, and a
// well-formed call renders and parses back to itself.
func FuzzCallFormats(f *testing.F) {
	for _, s := range []string{
		`<tool_call>{"name": "a", "arguments": {"x": 1}}</tool_call>`,
		`<|python_tag|>{"name": "a", "parameters": {"x": [1, {"y": null}]}}; {"name": "b"}`,
		`{"name": "a", "parameters": "{\"x\": 1}"}`,
		`[TOOL_CALLS] [{"name": "a", "arguments": {}, "id": "123456789"}]</s>`,
		`[TOOL_CALLS] [{"name": "a", "arguments": "{}"}, 3]`,
		"{\"name\"", "[TOOL_CALLS]", "<tool_call>",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		for _, fm := range []CallFormat{Hermes, Llama3JSON, Mistral} {
			calls := fm.Parse(text, ParseLimits{})
			if (calls != nil) != fm.HasCall(text) && fm != Llama3JSON {
				t.Fatalf("%s: HasCall %v but %d calls", fm.Name(), fm.HasCall(text), len(calls))
			}
			_ = fm.Content(text)
			for _, c := range calls {
				if c.Err != nil {
					continue
				}
				if c.Name == "" || !json.Valid(c.Arguments) {
					t.Fatalf("%s: well-formed call %+v", fm.Name(), c)
				}
				out, err := fm.Render([]Call{c})
				if err != nil {
					t.Fatalf("%s: render %+v: %v", fm.Name(), c, err)
				}
				back := fm.Parse(out, ParseLimits{MaxArgBytes: 1 << 20})
				if len(back) != 1 || back[0].Err != nil || back[0].Name != c.Name {
					t.Fatalf("%s: %q rendered %q parsed to %+v", fm.Name(), text, out, back)
				}
			}
		}
	})
}
