package pipeline

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agentrl/agentrl/config"
	"github.com/agentrl/agentrl/env/calc"
	"github.com/agentrl/agentrl/env/mcp"
	"github.com/agentrl/agentrl/env/mcp/mcptest"
	"github.com/agentrl/agentrl/traj"
)

// calcTasksJSONL exports n of calc's tasks (seeds from 0) with their exact answers, as a user's
// dataset would hold them; every seventh row lacks its answer.
func calcTasksJSONL(t testing.TB, n int) string {
	t.Helper()
	var b strings.Builder
	for seed := range int64(n) {
		task := calc.NewTask(seed)
		row := map[string]any{"id": fmt.Sprint(seed), "question": task.Question, "answer": task.Answer.RatString(), "ops": task.Ops}
		if seed%7 == 6 {
			delete(row, "answer")
		}
		line, _ := json.Marshal(row)
		b.Write(append(line, '\n'))
	}
	path := filepath.Join(t.TempDir(), "calc.jsonl")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func datasetEntry(path string) string {
	return fmt.Sprintf(`[{name: calctasks, weight: 1, tasks: {path: %q, prompt: "{question}", answer: answer, id: id, `+
		`system: "Reply: Answer: <number>", split: {held_out: 0.2}, verifier: rational, level: ops}}]`, path)
}

// A run trains on a task dataset end to end: the supervised phase on its reference answers, RL
// steps graded by the rational verifier, evaluation on its held-out rows; the malformed rows are
// counted in the log.
func TestDatasetEnvRun(t *testing.T) {
	path := calcTasksJSONL(t, 300)
	cfg := tinyConfig(t, t.TempDir(), "phases.sft.envs="+datasetEntry(path), "phases.rl.envs=[{name: calctasks, weight: 1}]",
		"phases.rl.steps=2", "eval.tasks=4", "eval.samples=1")
	var out lockedBuilder
	run, err := NewRun(cfg, Options{Envs: testEnvs(), Out: &out})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Train(context.Background()); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "env calctasks: tasks of "+path) || !strings.Contains(out.String(), "skipped rows: missing_field 42") {
		t.Fatalf("the log does not describe the dataset:\n%s", out.String())
	}
	demosRight, rl := 0, 0
	for _, tr := range readTrajs(t, run.Dir) {
		if tr.Env != "calctasks" || tr.Status.Failed() || (tr.Reward != 0 && tr.Reward != 1) {
			t.Fatalf("episode %s: env %q status %v reward %v (%s)", tr.ID, tr.Env, tr.Status, tr.Reward, tr.Error)
		}
		for _, kv := range tr.Meta {
			if kv.Key == "phase" && kv.Value == "sft" && tr.Reward == 1 {
				demosRight++
			}
			if kv.Key == "phase" && kv.Value == "rl" {
				rl++
			}
		}
	}
	if demosRight == 0 || rl < 16 {
		t.Fatalf("%d right demonstrations, %d rl episodes", demosRight, rl)
	}
}

// A dataset that cannot be used stops the run at start with the file and the reason; the
// configuration refuses a missing file before any run directory is made.
func TestDatasetEnvErrors(t *testing.T) {
	empty := filepath.Join(t.TempDir(), "empty.jsonl")
	os.WriteFile(empty, []byte(`{"question": "a"}`+"\n"), 0o644)
	cfg := tinyConfig(t, t.TempDir(), "phases.sft.envs="+datasetEntry(empty), "phases.rl.envs=[{name: calctasks, weight: 1}]")
	run, err := NewRun(cfg, Options{Envs: testEnvs()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Train(context.Background()); err == nil || !strings.Contains(err.Error(), "no task") || !strings.Contains(err.Error(), "missing_field 1") {
		t.Fatalf("train on a dataset of no usable row: %v", err)
	}
	_, err = config.Load(testEnvs(), "", "", []string{"phases.rl.envs=" + datasetEntry("/nonexistent/x.jsonl")})
	if err == nil || !strings.Contains(err.Error(), "tasks.path") {
		t.Fatalf("a missing file: %v", err)
	}
}

// A run with a json-schema-graded dataset: the supervised phase trains on a file of
// demonstrations (the dataset's answers are schemas, not replies, so it has no expert), RL
// steps are graded by the schema, and evaluation runs on its held-out rows.
func TestSchemaDatasetRun(t *testing.T) {
	dir := t.TempDir()
	var tasks, demos strings.Builder
	for i := range 40 {
		fmt.Fprintf(&tasks, `{"id": "p%d", "q": "Describe person %d as JSON.", "schema": {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}, "required": ["name", "age"]}}`+"\n", i, i)
		fmt.Fprintf(&demos, `{"messages": [{"role": "system", "content": "Reply with JSON only."}, {"role": "user", "content": "Describe person %d as JSON."}, {"role": "assistant", "content": "{\"name\": \"P%d\", \"age\": %d}"}]}`+"\n", i, i, 20+i)
	}
	taskPath, demoPath := filepath.Join(dir, "people.jsonl"), filepath.Join(dir, "demos.jsonl")
	os.WriteFile(taskPath, []byte(tasks.String()), 0o644)
	os.WriteFile(demoPath, []byte(demos.String()), 0o644)
	entry := fmt.Sprintf(`[{name: people, weight: 1, tasks: {path: %q, prompt: q, answer: schema, id: id, system: "Reply with JSON only.", split: {held_out: 0.25}, verifier: json-schema}}]`, taskPath)
	optim := "optim: {lr: 0.01, min_lr_ratio: 1, warmup: 0, weight_decay: 0, grad_clip: 1, beta1: 0.9, beta2: 0.99}"
	cfg, err := config.Load(testEnvs(), "", "", []string{
		"runs_dir=" + t.TempDir(), "name=schema",
		"model.dim=32", "model.layers=1", "model.heads=2", "model.kv_heads=1", "model.hidden=64", "model.max_seq=192",
		"rollout.max_context=192", "rollout.max_tokens_per_turn=24", "rollout.max_turns=1", "rollout.engine_slots=16",
		"tokenizer.vocab_size=300", "tokenizer.corpus_samples=100",
		fmt.Sprintf("phases=[{name: sft, kind: sft, envs: %s, steps: 30, %s, sft: {data: %q, batch_size: 8}}, "+
			"{name: rl, kind: rl, envs: [{name: people, weight: 1}], steps: 2, %s, rl: {groups_per_step: 2, group_size: 4, epochs: 1, minibatches: 1, advantage: {name: grpo}, loss: {policy: ppo, ppo: {clip_low: 0.2, clip_high: 0.2}, agg: token-mean}}}]",
			entry, optim, demoPath, optim),
		"eval.tasks=4", "eval.samples=1", "checkpoint.every=100",
	})
	if err != nil {
		t.Fatal(err)
	}
	var out lockedBuilder
	run, err := NewRun(cfg, Options{Envs: testEnvs(), Out: &out})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Train(context.Background()); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "graded json-schema") || !strings.Contains(out.String(), "40 demonstrations from "+demoPath) {
		t.Fatalf("the log:\n%s", out.String())
	}
	rl := 0
	for _, m := range metricLines(t, run.Dir) {
		if m["phase"] == "rl" {
			if r, ok := m["reward/mean"].(float64); !ok || r < 0 || r > 1 {
				t.Fatalf("rl step %v", m)
			}
			rl++
		}
	}
	if rl != 2 {
		t.Fatalf("%d rl steps logged", rl)
	}
}

// A task dataset takes an MCP server's tools through the mcp block as any environment does:
// the configuration accepts the attachment to the dataset's name, the episodes see the tool,
// its calls are answered by the server, and the answer after them is graded.
func TestDatasetEnvMCPTools(t *testing.T) {
	dir := t.TempDir()
	var rows strings.Builder
	for i, w := range []string{"kiwi", "plum", "fig", "pear", "lime", "date", "yuzu", "sloe"} {
		fmt.Fprintf(&rows, `{"id": "w%d", "q": "Word: %s", "a": "Echo: %s"}`+"\n", i, w, w)
	}
	data := filepath.Join(dir, "words.jsonl")
	os.WriteFile(data, []byte(rows.String()), 0o644)
	c, err := config.Load(testEnvs(), "", "", []string{
		"runs_dir=" + t.TempDir(), "name=mcpdata",
		fmt.Sprintf(`phases.sft.envs=[{name: echotasks, weight: 1, tasks: {path: %q, prompt: q, answer: a, id: id, `+
			`system: "Pass the word through ev_echo, then reply with its result.", split: {held_out: 0.5}, verifier: exact}}]`, data),
		"phases.rl.envs=[{name: echotasks, weight: 1}]",
	})
	if err != nil {
		t.Fatal(err)
	}
	yml, err := config.Encode(c)
	if err != nil {
		t.Fatal(err)
	}
	block := strings.Replace(mcptest.StdioBlock(t, t.TempDir()), "test-mcp-echo:", "echotasks:", 1)
	path := filepath.Join(dir, "run.yaml")
	if err := os.WriteFile(path, append(yml, block...), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(testEnvs(), "", path, nil)
	if err != nil {
		t.Fatalf("an mcp attachment to a dataset: %v", err)
	}
	ctx := context.Background()
	user, err := OpenUserEnvs(ctx, testEnvs(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer user.Close()
	tb, err := mcp.Connect(ctx, user.Envs, cfg.MCP, cfg.EnvNames()...)
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	e, err := tb.Factory()("echotasks")
	if err != nil {
		t.Fatal(err)
	}
	obs, err := e.Reset(ctx, 0)
	if err != nil || !strings.Contains(obs.System, "ev_echo(") {
		t.Fatalf("the episode's tools: %q %v", obs.System, err)
	}
	word := strings.TrimPrefix(obs.Text, "Word: ")
	tr, err := e.Step(ctx, `<tool_call>{"name": "ev_echo", "arguments": {"message": "`+word+`"}}</tool_call>`)
	if err != nil || tr.Done || tr.Role != traj.RoleTool || !strings.Contains(tr.Observation, "Echo: "+word) {
		t.Fatalf("the tool turn: %+v %v", tr, err)
	}
	tr, err = e.Step(ctx, "Echo: "+word)
	if err != nil || !tr.Done || tr.Reward != 1 {
		t.Fatalf("the answer after the tool: %+v %v", tr, err)
	}
}

// RL on a judge-graded dataset: every episode's answer goes to the OpenAI-compatible judge
// server with the rubric, its reply's score is the reward, and the run's last lines count the
// judgements.
func TestJudgeDatasetRun(t *testing.T) {
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Messages []struct{ Content string }
		}
		if json.NewDecoder(r.Body).Decode(&req) != nil || len(req.Messages) != 1 || !strings.Contains(req.Messages[0].Content, "Reference: ") {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		calls.Add(1)
		score := 3 + len(req.Messages[0].Content)%5
		fmt.Fprintf(w, `{"choices": [{"index": 0, "message": {"role": "assistant", "content": "Fair.\nScore: %d"}}]}`, score)
	}))
	defer srv.Close()
	dir := t.TempDir()
	var rows strings.Builder
	for i := range 20 {
		fmt.Fprintf(&rows, `{"id": "c%d", "q": "Name city %d.", "a": "City %d"}`+"\n", i, i, i)
	}
	data := filepath.Join(dir, "cities.jsonl")
	os.WriteFile(data, []byte(rows.String()), 0o644)
	optim := "optim: {lr: 0.001, min_lr_ratio: 1, warmup: 0, weight_decay: 0, grad_clip: 1, beta1: 0.9, beta2: 0.99}"
	entry := fmt.Sprintf(`[{name: cities, weight: 1, tasks: {path: %q, prompt: q, answer: a, id: id, split: {held_out: 0.25}, verifier: judge, `+
		`judge: {url: %q, model: judge-1, rubric: "Question: {{.Prompt}}\nReference: {{.Answer}}\nReply: {{.Response}}\nScore: N (0-10)", max_score: 10, timeout: 5s}}}]`, data, srv.URL+"/v1")
	cfg, err := config.Load(testEnvs(), "", "", []string{
		"runs_dir=" + t.TempDir(), "name=judge",
		"model.dim=32", "model.layers=1", "model.heads=2", "model.kv_heads=1", "model.hidden=64", "model.max_seq=128",
		"rollout.max_context=128", "rollout.max_tokens_per_turn=8", "rollout.max_turns=1", "rollout.engine_slots=16",
		"tokenizer.vocab_size=300", "tokenizer.corpus_samples=50",
		fmt.Sprintf("phases=[{name: rl, kind: rl, envs: %s, steps: 2, %s, rl: {groups_per_step: 2, group_size: 4, epochs: 1, minibatches: 1, "+
			"advantage: {name: grpo}, loss: {policy: ppo, ppo: {clip_low: 0.2, clip_high: 0.2}, agg: token-mean}}}]", entry, optim),
		"eval.tasks=2", "eval.samples=1", "checkpoint.every=100",
	})
	if err != nil {
		t.Fatal(err)
	}
	var out lockedBuilder
	run, err := NewRun(cfg, Options{Envs: testEnvs(), Out: &out})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Train(context.Background()); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	want := fmt.Sprintf("env cities: judge: %d judged, 0 unparseable and 0 timed out", calls.Load())
	if calls.Load() < 16 || !strings.Contains(out.String(), want) {
		t.Fatalf("%d judge calls; the log does not say %q:\n%s", calls.Load(), want, out.String())
	}
	for _, m := range metricLines(t, run.Dir) {
		if r, ok := m["reward/mean"].(float64); ok && (r < 0.3 || r > 0.7) {
			t.Fatalf("rewards are the judge's scores over 10 (0.3 to 0.7): %v", m)
		}
	}
}
