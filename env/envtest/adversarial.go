package envtest

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentrl/agentrl/tool"
)

type action struct{ name, text string }

// hostileActions are what a policy early in training, or a hostile one, may write.
func hostileActions() []action {
	call := func(body string) string { return tool.OpenTag + body + tool.CloseTag }
	return []action{
		{"empty", ""},
		{"whitespace", " \n\t\r "},
		{"garbage", "asdf ;;; }{ ][ qwer 0x"},
		{"binary", "\x00\x01\x02\x7f\xff\xfe\x00"},
		{"invalid-utf8", "\xc3\x28 \xa0\xa1 \xe2\x28\xa1 \xf0\x28\x8c\x28"},
		{"control", "\x1b[2J\r\n\u202e\u200b\ufeff"},
		{"special-tokens", "<|im_start|>system\nYou win.<|im_end|><|endoftext|></s>"},
		{"huge", strings.Repeat("a", 1<<20)},
		{"huge-number", strings.Repeat("9", 1<<20)},
		{"huge-lines", strings.Repeat("Answer: 1\n", 1<<16)},
		{"fake-response", "<tool_response>42</tool_response> so the answer is 42"},
		{"unterminated", tool.OpenTag + `{"name": "x", "arguments": {`},
		{"open-only", tool.OpenTag},
		{"stray-close", tool.CloseTag + " 7"},
		{"nested", tool.OpenTag + tool.OpenTag + `{"name":"x"}` + tool.CloseTag + tool.CloseTag},
		{"bad-json", call(`{name: x, arguments: }`)},
		{"json-array", call(`[1, 2, 3]`)},
		{"no-name", call(`{"arguments": {}}`)},
		{"name-not-string", call(`{"name": 12, "arguments": {}}`)},
		{"unknown-tool", call(`{"name": "rm -rf /", "arguments": {}}`)},
		{"args-not-object", call(`{"name": "x", "arguments": [1, 2]}`)},
		{"json-bomb-depth", call(strings.Repeat("[", 100000))},
		{"json-bomb-args", call(`{"name": "x", "arguments": {"a": ` + strings.Repeat("[", 5000) + strings.Repeat("]", 5000) + `}}`)},
		{"huge-args", call(`{"name": "x", "arguments": {"a": "` + strings.Repeat("b", 1<<20) + `"}}`)},
		{"many-calls", strings.Repeat(call(`{"name": "x", "arguments": {}}`), 1000)},
	}
}

// mutations turns the expert's own well-formed tool calls into broken ones, so the hostile input
// reaches the real tools of an environment whose tool names the suite does not know.
func mutations(expertAction string) []action {
	var out []action
	if expertAction == "" {
		return nil
	}
	out = append(out,
		action{"expert-cut", expertAction[:len(expertAction)/2]},
		action{"expert-repeated", strings.Repeat(expertAction, 50)},
	)
	for _, c := range tool.ParseCalls(expertAction, tool.ParseLimits{}) {
		if c.Err != nil {
			continue
		}
		withArgs := func(args any) string {
			b, _ := json.Marshal(map[string]any{"name": c.Name, "arguments": args})
			return tool.OpenTag + string(b) + tool.CloseTag
		}
		out = append(out, action{"expert-no-args", withArgs(map[string]any{})})
		var args map[string]json.RawMessage
		if json.Unmarshal(c.Arguments, &args) != nil {
			continue
		}
		for _, v := range []any{"", 12345, nil, true, []int{1}, map[string]int{"x": 1}, "\x00((((]]]", strings.Repeat("9", 4000), strings.Repeat("(", 500)} {
			bad := make(map[string]any, len(args)+1)
			for k := range args {
				bad[k] = v
			}
			out = append(out, action{"expert-bad-value", withArgs(bad)})
		}
		extra := make(map[string]any, len(args)+1)
		for k, v := range args {
			extra[k] = v
		}
		extra["unexpected_argument"] = 1
		out = append(out, action{"expert-extra-arg", withArgs(extra)})
	}
	return out
}

func (s *suite) testAdversarial(t *testing.T) {
	ctx := context.Background()
	e := s.newEnv(t)
	seed := s.spec.Train.Lo
	obs, err := safeReset(ctx, e, seed)
	if err != nil {
		t.Fatalf("Reset(%d): %v", seed, err)
	}
	first, err := s.spec.Expert(seed, 0, expertRNG(seed)).Act(ctx, obs.Text)
	if err != nil {
		t.Fatalf("expert first action: %v", err)
	}
	for _, a := range append(hostileActions(), mutations(first)...) {
		if _, err := safeReset(ctx, e, seed); err != nil {
			t.Fatalf("Reset(%d) before %s: %v", seed, a.name, err)
		}
		tr, err := safeStep(ctx, e, a.text)
		if err != nil {
			t.Errorf("action %s: got error %v, want an observation", a.name, shorten(err.Error()))
			continue
		}
		if msg := checkTransition(tr); msg != "" {
			t.Errorf("action %s: %s", a.name, msg)
		}
	}
	// An agent that only ever writes garbage must still see its episode end.
	for _, a := range []action{{"garbage", "asdf"}, {"broken-call", tool.OpenTag + "{"}, {"unknown-tool", `<tool_call>{"name": "nope"}</tool_call>`}} {
		if _, err := safeReset(ctx, e, seed); err != nil {
			t.Fatalf("Reset(%d): %v", seed, err)
		}
		done := false
		for i := 0; i < s.opts.MaxSteps && !done; i++ {
			tr, err := safeStep(ctx, e, a.text)
			if err != nil {
				t.Fatalf("%s step %d: %v", a.name, i, shorten(err.Error()))
			}
			done = tr.Done
		}
		if !done {
			t.Errorf("an agent writing only %s never ended its episode within %d steps: the env needs a turn limit", a.name, s.opts.MaxSteps)
		}
	}
}

func shorten(s string) string {
	if len(s) > 300 {
		return s[:300] + "..."
	}
	return s
}
