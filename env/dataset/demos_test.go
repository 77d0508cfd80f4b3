package dataset

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

const calcTool = `{"type": "function", "function": {"name": "calculator", "description": "Evaluate arithmetic.", "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}}}}`

// demoLines are rows of each shape the loop plays: a tool call answered, two calls answered out
// of order by id, a user's correction, a lone answer.
var demoLines = []string{
	`{"messages": [{"role": "system", "content": "Be exact."}, {"role": "user", "content": "17*23?"}, {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "calculator", "arguments": "{\"expression\": \"17*23\"}"}}]}, {"role": "tool", "tool_call_id": "c1", "content": "391"}, {"role": "assistant", "content": "391"}], "tools": [` + calcTool + `]}`,
	`{"messages": [{"role": "user", "content": "2+3 and 4+5?"}, {"role": "assistant", "content": "Both.", "tool_calls": [{"id": "a", "type": "function", "function": {"name": "calculator", "arguments": {"expression": "2+3"}}}, {"id": "b", "type": "function", "function": {"name": "calculator", "arguments": {"expression": "4+5"}}}]}, {"role": "tool", "tool_call_id": "b", "content": "9"}, {"role": "tool", "tool_call_id": "a", "content": "5"}, {"role": "assistant", "content": "5 and 9"}], "tools": [` + calcTool + `]}`,
	`{"messages": [{"role": "user", "content": "Capital of France?"}, {"role": "assistant", "content": "Lyon"}, {"role": "user", "content": "No."}, {"role": "assistant", "content": "Paris"}]}`,
	`{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}`,
}

func TestReadDemos(t *testing.T) {
	d, err := ReadDemos(strings.NewReader(strings.Join(demoLines, "\n")+"\n\n"), DemoConfig{Strict: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Rows) != 4 {
		t.Fatalf("%d rows", len(d.Rows))
	}
	r0 := d.Rows[0]
	if r0.Line != 1 || r0.System != "Be exact." || r0.User != "17*23?" || len(r0.Turns) != 2 || r0.Turns[0].ObsRole != "tool" ||
		r0.Turns[0].Results[0] != "391" || r0.Turns[1].ObsRole != "" || len(r0.Tools) != 1 {
		t.Fatalf("row 1: %+v", r0)
	}
	// Results in the calls' order, whatever order the tool messages came in.
	if r := d.Rows[1].Turns[0]; len(r.Results) != 2 || r.Results[0] != "5" || r.Results[1] != "9" || r.Assistant.Content != "Both." {
		t.Fatalf("row 2's tool turn: %+v", r)
	}
	if r := d.Rows[2]; len(r.Turns) != 2 || r.Turns[0].ObsRole != "user" || r.Turns[0].Results[0] != "No." || r.Tools != nil {
		t.Fatalf("row 3: %+v", r)
	}
}

// Every bad row is refused with its line and reason in strict mode, and dropped and counted
// otherwise.
func TestReadDemosBadRows(t *testing.T) {
	cases := []struct{ line, reason string }{
		{`{"messages": [{"role": "user", "content": "x"}, {"role": "robot", "content": "y"}]}`, "unknown_role"},
		{`{"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": [{"id": "1", "function": {"name": "calculator", "arguments": "{}"}}]}]}`, "unanswered_tool_call"},
		{`{"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": [{"id": "1", "function": {"name": "f", "arguments": "{}"}}, {"id": "2", "function": {"name": "f", "arguments": "{}"}}]}, {"role": "tool", "content": "r"}, {"role": "assistant", "content": "y"}]}`, "unanswered_tool_call"},
		{`{"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": [{"id": "1", "function": {"name": "f", "arguments": "{}"}}]}, {"role": "tool", "tool_call_id": "9", "content": "r"}, {"role": "assistant", "content": "y"}]}`, "unexpected_tool"},
		{`{"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}, {"role": "tool", "content": "r"}]}`, "unexpected_tool"},
		{`{"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}, {"role": "user", "content": "z"}]}`, "no_final_assistant"},
		{`{"messages": [{"role": "user", "content": "x"}]}`, "no_final_assistant"},
		{`{"messages": [{"role": "assistant", "content": "y"}]}`, "no_user"},
		{`{"messages": [{"role": "user", "content": "x"}, {"role": "system", "content": "s"}, {"role": "assistant", "content": "y"}]}`, "misplaced_system"},
		{`{"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": " "}]}`, "empty_turn"},
		{`{"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": [{"id": "1", "function": {"name": "rm", "arguments": "{}"}}]}, {"role": "tool", "content": "r"}, {"role": "assistant", "content": "y"}], "tools": [` + calcTool + `]}`, "unknown_tool"},
		{`{"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}], "weight": 2}`, "bad_json"},
		{`{"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}`, "bad_json"},
		{`[{"role": "user", "content": "x"}]`, "bad_json"},
		{`{"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": [{"id": "1", "function": {"name": "f", "arguments": "[1]"}}]}, {"role": "tool", "content": "r"}, {"role": "assistant", "content": "y"}]}`, "bad_json"},
		{"{\"messages\": [{\"role\": \"user\", \"content\": \"\xff\"}]}", "invalid_utf8"},
		{`{"messages": [{"role": "user", "content": "` + strings.Repeat("x", 600) + `"}, {"role": "assistant", "content": "y"}]}`, "line_too_long"},
	}
	good := demoLines[3]
	for _, c := range cases {
		data := good + "\n" + c.line + "\n" + good + "\n"
		_, err := ReadDemos(strings.NewReader(data), DemoConfig{Strict: true, MaxLineBytes: 512})
		var re *RowError
		if !errors.As(err, &re) || re.Line != 2 || re.Reason != c.reason {
			t.Errorf("%s: strict: %v, want line 2: %s", c.line, err, c.reason)
			continue
		}
		d, err := ReadDemos(strings.NewReader(data), DemoConfig{MaxLineBytes: 512})
		if err != nil || len(d.Rows) != 2 || d.Skipped[c.reason] != 1 || !strings.HasPrefix(d.Examples[0], "line 2: "+c.reason) {
			t.Errorf("%s: dropped: %v, %+v", c.line, err, d)
		}
	}
	if _, err := ReadDemos(strings.NewReader(cases[0].line+"\n"), DemoConfig{}); err == nil || !strings.Contains(err.Error(), "unknown_role 1") {
		t.Fatalf("a file of bad rows only: %v", err)
	}
	if _, err := ReadDemos(strings.NewReader(strings.Repeat(good+"\n", 3)), DemoConfig{MaxRows: 2}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("over max rows: %v", err)
	}
	if _, err := ReadDemos(strings.NewReader(strings.Repeat(good+"\n", 3)), DemoConfig{MaxBytes: 100}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("over max bytes: %v", err)
	}
}

// The reader takes any bytes: demonstrations or an error, never a panic; every row kept is in
// the loop's shape. `go test -run=^$ -fuzz=FuzzReadDemos ./env/dataset` explores.
func FuzzReadDemos(f *testing.F) {
	f.Add([]byte(strings.Join(demoLines, "\n")), false)
	f.Add([]byte(`{"messages": [{"role": "user"}, {"role": "assistant", "content": "a", "tool_calls": [{"function": {"name": "x", "arguments": "\"{}\""}}]}, {"role": "tool"}, {"role": "tool"}]}`), true)
	f.Add([]byte("{\"messages\": null}\n{}\nnull\n{\"messages\": [{\"role\": \"user\", \"content\": 3}]}"), false)
	f.Fuzz(func(t *testing.T, data []byte, strict bool) {
		d, err := ReadDemos(bytes.NewReader(data), DemoConfig{Strict: strict, MaxLineBytes: 1 << 12, MaxRows: 50})
		if err != nil {
			return
		}
		for _, r := range d.Rows {
			if len(r.Turns) == 0 || r.Turns[len(r.Turns)-1].ObsRole != "" || !utf8.ValidString(r.User+r.System) {
				t.Fatalf("row %+v kept", r)
			}
			for _, tu := range r.Turns[:len(r.Turns)-1] {
				if tu.ObsRole == "tool" && len(tu.Results) != len(tu.Assistant.ToolCalls) || tu.ObsRole == "" {
					t.Fatalf("turn %+v kept", tu)
				}
			}
		}
	})
}
