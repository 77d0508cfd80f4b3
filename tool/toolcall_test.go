package tool

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestParseCalls(t *testing.T) {
	call := func(body string) string { return OpenTag + body + CloseTag }
	type want struct {
		name string
		args string
		err  error
	}
	cases := []struct {
		name string
		text string
		lim  ParseLimits
		want []want
	}{
		{"no tags", "Answer: 42", ParseLimits{}, nil},
		{"one call", "let me compute " + call(`{"name": "calculator", "arguments": {"expression": "1+2"}}`) + " ok",
			ParseLimits{}, []want{{"calculator", `{"expression": "1+2"}`, nil}}},
		{"two calls", call(`{"name":"a","arguments":{}}`) + "\n" + call(` {"name":"b","arguments":{"x":1}} `),
			ParseLimits{}, []want{{"a", `{}`, nil}, {"b", `{"x":1}`, nil}}},
		{"missing arguments", call(`{"name":"a"}`), ParseLimits{}, []want{{"a", `{}`, nil}}},
		{"null arguments", call(`{"name":"a","arguments":null}`), ParseLimits{}, []want{{"a", `{}`, nil}}},
		{"string-encoded arguments", call(`{"name":"a","arguments":"{\"x\": 2}"}`), ParseLimits{}, []want{{"a", `{"x": 2}`, nil}}},
		{"bad json", call(`{name: a}`), ParseLimits{}, []want{{"", "", ErrBadJSON}}},
		{"trailing garbage", call(`{"name":"a"} extra`), ParseLimits{}, []want{{"", "", ErrBadJSON}}},
		{"array body", call(`[1]`), ParseLimits{}, []want{{"", "", ErrBadJSON}}},
		{"null body", call(`null`), ParseLimits{}, []want{{"", "", ErrBadJSON}}},
		{"empty body", call(``), ParseLimits{}, []want{{"", "", ErrBadJSON}}},
		{"missing name", call(`{"arguments":{}}`), ParseLimits{}, []want{{"", "", ErrNoName}}},
		{"empty name", call(`{"name":"  "}`), ParseLimits{}, []want{{"", "", ErrNoName}}},
		{"numeric name", call(`{"name":7}`), ParseLimits{}, []want{{"", "", ErrNoName}}},
		{"array arguments", call(`{"name":"a","arguments":[1]}`), ParseLimits{}, []want{{"a", "", ErrArgsNotObject}}},
		{"number arguments", call(`{"name":"a","arguments":3}`), ParseLimits{}, []want{{"a", "", ErrArgsNotObject}}},
		{"string arguments", call(`{"name":"a","arguments":"x"}`), ParseLimits{}, []want{{"a", "", ErrArgsNotObject}}},
		{"unterminated", "x " + OpenTag + `{"name":"a"}`, ParseLimits{}, []want{{"", "", ErrUnterminated}}},
		{"good then unterminated", call(`{"name":"a"}`) + OpenTag, ParseLimits{}, []want{{"a", `{}`, nil}, {"", "", ErrUnterminated}}},
		{"stray close", "7 " + CloseTag, ParseLimits{}, []want{{"", "", ErrUnmatched}}},
		{"nested", OpenTag + OpenTag + `{"name":"a"}` + CloseTag + CloseTag + call(`{"name":"b"}`), ParseLimits{},
			[]want{{"", "", ErrNested}, {"b", `{}`, nil}}},
		{"nested unbalanced", OpenTag + OpenTag + `{"name":"a"}` + CloseTag, ParseLimits{}, []want{{"", "", ErrNested}}},
		{"too large", call(`{"name":"a","arguments":{"x":"` + strings.Repeat("y", 100) + `"}}`), ParseLimits{MaxArgBytes: 50},
			[]want{{"", "", ErrArgsTooLarge}}},
		{"too many", strings.Repeat(call(`{"name":"a"}`), 5), ParseLimits{MaxCalls: 2},
			[]want{{"a", `{}`, nil}, {"a", `{}`, nil}, {"", "", ErrTooManyCalls}}},
		{"negative limits use defaults", call(`{"name":"a"}`), ParseLimits{MaxCalls: -1}, []want{{"a", `{}`, nil}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := ParseCalls(tc.text, tc.lim)
			if len(got) != len(tc.want) {
				t.Fatalf("got %d calls %+v, want %d", len(got), got, len(tc.want))
			}
			for i, w := range tc.want {
				g := got[i]
				if w.err != nil {
					if !errors.Is(g.Err, w.err) {
						t.Errorf("call %d: err %v, want %v", i, g.Err, w.err)
					}
				} else if g.Err != nil {
					t.Errorf("call %d: unexpected error %v", i, g.Err)
				}
				if g.Name != w.name {
					t.Errorf("call %d: name %q, want %q", i, g.Name, w.name)
				}
				if w.err == nil && string(g.Arguments) != w.args {
					t.Errorf("call %d: arguments %s, want %s", i, g.Arguments, w.args)
				}
			}
		})
	}
}

func TestParseLimitsValidate(t *testing.T) {
	for _, tc := range []struct {
		lim ParseLimits
		ok  bool
	}{{ParseLimits{}, true}, {ParseLimits{MaxCalls: 3, MaxArgBytes: 10}, true}, {ParseLimits{MaxCalls: -1}, false}, {ParseLimits{MaxArgBytes: -5}, false}} {
		if err := tc.lim.Validate(); (err == nil) != tc.ok {
			t.Errorf("%+v: Validate() = %v", tc.lim, err)
		}
	}
}

func TestInfraError(t *testing.T) {
	cause := errors.New("sandbox died")
	err := Infra(cause)
	if !errors.Is(err, ErrInfra) || !errors.Is(err, cause) {
		t.Errorf("Infra(%v) = %v: want both ErrInfra and the cause", cause, err)
	}
	if Infra(nil) != nil {
		t.Error("Infra(nil) != nil")
	}
	if errors.Is(cause, ErrInfra) {
		t.Error("a plain error matched ErrInfra")
	}
}

// FuzzParseCalls checks that no text makes the parser panic, that every reported call is either
// well formed or carries an error, and that the call count respects the limit.
func FuzzParseCalls(f *testing.F) {
	for _, s := range []string{
		"", "Answer: 3", OpenTag, CloseTag, OpenTag + CloseTag,
		OpenTag + `{"name":"calculator","arguments":{"expression":"1+2"}}` + CloseTag,
		OpenTag + OpenTag + CloseTag + CloseTag, OpenTag + `{"name":"a","arguments":"{}"}` + CloseTag,
		"\xff" + OpenTag + "\x00" + CloseTag,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		lim := ParseLimits{MaxCalls: 3, MaxArgBytes: 64}
		calls := ParseCalls(text, lim)
		if (calls == nil) == HasCall(text) {
			t.Fatalf("HasCall %v but %d calls", HasCall(text), len(calls))
		}
		if len(calls) > lim.MaxCalls+1 {
			t.Fatalf("%d calls past the limit of %d", len(calls), lim.MaxCalls)
		}
		for i, c := range calls {
			if c.Err == nil && (c.Name == "" || !isObject(c.Arguments)) {
				t.Fatalf("call %d accepted without a name or object arguments: %+v", i, c)
			}
			if len(c.Raw) > max(maxRawKept, lim.MaxArgBytes) {
				t.Fatalf("call %d keeps %d raw bytes", i, len(c.Raw))
			}
			if utf8.ValidString(text) && !utf8.ValidString(c.Raw) {
				t.Fatalf("call %d: raw cut inside a rune", i)
			}
		}
	})
}
