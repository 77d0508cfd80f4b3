package tokenizer

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// episode is a conversation as the agent loop builds it: a prompt, then alternating completions
// (sampled by the model, ending with ImEnd) and observations.
type episode struct {
	system, user string
	completions  []string // assistant texts without ImEnd
	obsRoles     []string // one per completion except possibly the last
	observations []string
}

var chatEpisodes = []episode{
	{
		system: "You are a calculator agent.", user: "What is 123456789 * 987654321?",
		completions: []string{
			`<tool_call>{"name": "calculator", "arguments": {"expression": "123456789 * 987654321"}}</tool_call>`,
			"The answer is 121932631112635269.",
		},
		obsRoles:     []string{"tool", "user"},
		observations: []string{"<tool_response>121932631112635269</tool_response>", "Correct."},
	},
	{
		user:         "Say hi.\n\n  (twice)",
		completions:  []string{"hi hi", "Done."},
		obsRoles:     []string{"user"},
		observations: []string{"  Again?  \n"},
	},
	{
		system: "sys", user: "ünïcødé 😀 and\ttabs",
		completions:  []string{"\nStarts with a newline", " starts with a space", "x"},
		obsRoles:     []string{"tool", "tool", "tool"},
		observations: []string{"", "<tool_response>\n{\"ok\": true}\n</tool_response>", "last"},
	},
}

// pieces returns the episode's tokens as the agent loop assembles them, and its messages.
func (e episode) pieces(tok *Tokenizer) ([]int32, []Message) {
	ids := tok.EncodePrompt(e.system, e.user)
	var msgs []Message
	if e.system != "" {
		msgs = append(msgs, Message{"system", e.system})
	}
	msgs = append(msgs, Message{"user", e.user})
	for i, c := range e.completions {
		ids = append(ids, tok.Encode(c)...)
		ids = append(ids, tok.EndOfTurn())
		msgs = append(msgs, Message{"assistant", c})
		if i >= len(e.observations) {
			break
		}
		if i == len(e.completions)-1 {
			ids = append(ids, tok.EncodeFinal(e.obsRoles[i], e.observations[i])...)
		} else {
			ids = append(ids, tok.EncodeObservation(e.obsRoles[i], e.observations[i])...)
		}
		msgs = append(msgs, Message{e.obsRoles[i], e.observations[i]})
	}
	return ids, msgs
}

// endsOnObservation reports whether the episode's last piece is an observation (EncodeFinal) or
// an assistant turn.
func (e episode) endsOnObservation() bool { return len(e.observations) == len(e.completions) }

func TestChatPiecesMatchTemplate(t *testing.T) {
	tok := testTokenizer(t)
	for i, e := range chatEpisodes {
		ids, msgs := e.pieces(tok)
		want := RenderChat(msgs, false)
		if !e.endsOnObservation() {
			// The conversation ends on a completion: the template adds its trailing newline.
			ids = append(ids, tok.Encode("\n")...)
		}
		if got := tok.Decode(ids); got != want {
			t.Errorf("episode %d: pieces decode to\n%q\nthe template renders\n%q", i, got, want)
		}
		// Token-level agreement holds when no completion starts with two whitespace characters.
		if whole := tok.Encode(want); !slices.Equal(ids, whole) {
			t.Errorf("episode %d: pieces %v differ from encoding the rendered text %v", i, ids, whole)
		}
	}
}

func TestEncodePrompt(t *testing.T) {
	tok := testTokenizer(t)
	tests := []struct {
		system, user, want string
	}{
		{"S", "U", "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n"},
		{"", "U", "<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n"},
		{"", "", "<|im_start|>user\n<|im_end|>\n<|im_start|>assistant\n"},
	}
	for _, tt := range tests {
		ids := tok.EncodePrompt(tt.system, tt.user)
		if got := tok.Decode(ids); got != tt.want {
			t.Errorf("EncodePrompt(%q, %q) decodes to %q, want %q", tt.system, tt.user, got, tt.want)
		}
		if ids[0] != mustID(t, tok, ImStart) {
			t.Errorf("EncodePrompt(%q, %q) starts with %d, not ImStart", tt.system, tt.user, ids[0])
		}
	}
	obs := tok.EncodeObservation("tool", "42")
	if got, want := tok.Decode(obs), "\n<|im_start|>tool\n42<|im_end|>\n<|im_start|>assistant\n"; got != want {
		t.Errorf("EncodeObservation decodes to %q, want %q", got, want)
	}
	final := tok.EncodeFinal("tool", "42")
	if got, want := tok.Decode(final), "\n<|im_start|>tool\n42<|im_end|>\n"; got != want {
		t.Errorf("EncodeFinal decodes to %q, want %q", got, want)
	}
	if tok.EndOfTurn() != mustID(t, tok, ImEnd) {
		t.Errorf("EndOfTurn %d is not the id of ImEnd", tok.EndOfTurn())
	}
}

func mustID(t *testing.T, tok *Tokenizer, s string) int32 {
	t.Helper()
	id, ok := tok.SpecialID(s)
	if !ok {
		t.Fatalf("no id for %q", s)
	}
	return id
}

// TestChatTemplateJinja renders the saved template with Jinja2 configured as transformers
// configures it (sandboxed, trim_blocks, lstrip_blocks) and compares with RenderChat. Skipped when
// Python's jinja2 is absent.
func TestChatTemplateJinja(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed")
	}
	if err := exec.Command(python, "-c", "import jinja2").Run(); err != nil {
		t.Skip("python3 jinja2 is not installed")
	}
	tok := testTokenizer(t)
	dir := t.TempDir()
	if err := tok.Save(dir); err != nil {
		t.Fatal(err)
	}
	var convs [][]Message
	for _, e := range chatEpisodes {
		_, msgs := e.pieces(tok)
		convs = append(convs, msgs)
	}
	data, err := json.Marshal(convs)
	if err != nil {
		t.Fatal(err)
	}
	convPath := filepath.Join(dir, "convs.json")
	if err := os.WriteFile(convPath, data, 0o644); err != nil {
		t.Fatal(err)
	}
	const script = `
import json, sys
from jinja2.sandbox import ImmutableSandboxedEnvironment
cfg = json.load(open(sys.argv[1]))
env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
tmpl = env.from_string(cfg["chat_template"])
out = []
for msgs in json.load(open(sys.argv[2])):
    out.append([tmpl.render(messages=msgs, add_generation_prompt=g, eos_token=cfg["eos_token"]) for g in (False, True)])
json.dump(out, sys.stdout)
`
	out, err := exec.Command(python, "-c", script, filepath.Join(dir, ConfigFile), convPath).Output()
	if err != nil {
		t.Fatalf("jinja2 render: %v", err)
	}
	var rendered [][2]string
	if err := json.Unmarshal(out, &rendered); err != nil {
		t.Fatal(err)
	}
	for i, msgs := range convs {
		for g, gen := range []bool{false, true} {
			if got := RenderChat(msgs, gen); got != rendered[i][g] {
				t.Errorf("conversation %d, add_generation_prompt=%v:\nRenderChat %q\n    jinja2 %q", i, gen, got, rendered[i][g])
			}
		}
	}
	if !strings.Contains(tok.ChatTemplate(), "add_generation_prompt") {
		t.Errorf("chat template lacks the generation prompt branch")
	}
}
