package pipeline

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agentrl/agentrl/checkpoint"
	"github.com/agentrl/agentrl/config"
	"github.com/agentrl/agentrl/learn"
	"github.com/agentrl/agentrl/learn/tinker"
	"github.com/agentrl/agentrl/learn/tinker/tinkerfake"
	"github.com/agentrl/agentrl/model"
)

// tinkerBase trains a short SFT phase alone on the tiny model, on calc or test-ones (whose
// partial rewards give RL a signal within a few steps): its last checkpoint is the base model
// that the Tinker runs start from (init) and the fake service serves.
func tinkerBase(t *testing.T, envName string) (string, *checkpoint.Checkpoint) {
	t.Helper()
	c, err := config.Load(onesEnvs(), "", "", []string{
		"runs_dir=" + t.TempDir(), "name=base",
		"model.dim=32", "model.layers=1", "model.heads=2", "model.kv_heads=1", "model.hidden=64", "model.max_seq=" + tinkerContext(envName),
		"rollout.max_context=" + tinkerContext(envName), "rollout.max_tokens_per_turn=" + tinkerTurn(envName), "rollout.max_turns=" + tinkerTurns(envName), "rollout.engine_slots=32",
		"tokenizer.vocab_size=300", "tokenizer.corpus_samples=200",
		"phases=[{name: sft, kind: sft, envs: [{name: " + envName + ", weight: 1}], steps: 8, " +
			"optim: {lr: 0.003, min_lr_ratio: 1, warmup: 0, weight_decay: 0, grad_clip: 1, beta1: 0.9, beta2: 0.99}, " +
			"sft: {demos: 64, noise: 0.5, batch_size: 8, keep: all}}]",
		"eval.tasks=4",
	})
	if err != nil {
		t.Fatal(err)
	}
	run, err := NewRun(c, Options{Envs: onesEnvs()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Train(context.Background()); err != nil {
		t.Fatal(err)
	}
	dir := run.checkpointDir(run.stepName(0, c.Phases[0].Steps))
	ck, err := checkpoint.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return dir, ck
}

// tinkerContext is the context the tiny model needs for envName: calc's prompts are long.
func tinkerContext(envName string) string {
	if envName == "calc" {
		return "320"
	}
	return "128"
}

// tinkerTurn and tinkerTurns bound an episode: calc calls its calculator before it answers.
func tinkerTurn(envName string) string {
	if envName == "calc" {
		return "64"
	}
	return "8"
}

func tinkerTurns(envName string) string {
	if envName == "calc" {
		return "4"
	}
	return "1"
}

// tinkerRun is an RL phase of 4 steps on envName from init, trained on the Tinker service at url.
func tinkerRun(t *testing.T, envName, init, url string, timeout time.Duration) config.Config {
	t.Helper()
	c, err := config.Load(onesEnvs(), "", "", []string{
		"runs_dir=" + t.TempDir(), "name=tinker", "init=" + init,
		"rollout.max_context=" + tinkerContext(envName), "rollout.max_tokens_per_turn=" + tinkerTurn(envName), "rollout.max_turns=" + tinkerTurns(envName), "rollout.engine_slots=32",
		"phases=[{name: rl, kind: rl, envs: [{name: " + envName + ", weight: 1}], steps: 4, " +
			"optim: {lr: 0.01, min_lr_ratio: 1, warmup: 0, weight_decay: 0, grad_clip: 0, beta1: 0.9, beta2: 0.99}, " +
			"rl: {groups_per_step: 4, group_size: 8, epochs: 1, minibatches: 2, advantage: {name: grpo}, loss: {policy: ppo, ppo: {clip_low: 0.2, clip_high: 0.2}, agg: token-mean}}}]",
		"eval.tasks=16", "checkpoint.every=2",
	})
	if err != nil {
		t.Fatal(err)
	}
	c.Learner = learn.BackendConfig{Backend: learn.BackendTinker, URL: url, BaseModel: "agentrl/tiny", Rank: 8, Timeout: timeout}
	return c
}

func tinkerService(t *testing.T, ck *checkpoint.Checkpoint) (*tinkerfake.Service, string) {
	svc := &tinkerfake.Service{Base: ck.Model, BaseModel: "agentrl/tiny", Slots: 16}
	srv := httptest.NewServer(svc)
	t.Cleanup(func() { srv.Close(); svc.Close() })
	return svc, srv.URL
}

// A calc RL run through `learner: {backend: tinker}` against a Tinker service that computes (the
// built-in model behind Tinker's routes): every update trains on the service, rollouts and
// evaluations sample the version just saved there, the evaluation after training is not the
// base's, checkpoints name the weights on the service and hold none, and a run stopped after
// step 2 resumes there with the metrics of the run that was never stopped.
func TestRunThroughTinker(t *testing.T) {
	init, ck := tinkerBase(t, "test-ones")
	svc, url := tinkerService(t, ck)
	cfg := tinkerRun(t, "test-ones", init, url, time.Minute)
	run, err := NewRun(cfg, Options{Envs: onesEnvs()})
	if err != nil {
		t.Fatal(err)
	}
	sum, err := run.Train(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if n := run.model.NumParams(); n != 0 {
		t.Fatalf("the run holds %d weights of its own; a Tinker run's live on the service", n)
	}
	lines := phaseLines(t, run.Dir, "rl")
	rl := cfg.Phases[0].RL
	if len(lines) != 4 {
		t.Fatalf("%d RL steps trained, want 4", len(lines))
	}
	for i, m := range lines {
		if n, _ := m["tinker/samples"].(float64); !(n > 0) {
			t.Fatalf("step %d sampled %v times through the Tinker sampler", i+1, m["tinker/samples"])
		}
	}
	svc.Lock()
	calls := append([]string(nil), svc.Calls...)
	samples := map[string]int{}
	for k, v := range svc.Samples {
		samples[k] = v
	}
	svc.Unlock()
	model := ""
	for p := range samples {
		model = strings.Split(strings.TrimPrefix(p, "tinker://"), "/")[0]
	}
	if got, want := svc.Steps(model), int64(4*rl.Epochs*rl.Minibatches); got != want {
		t.Fatalf("the service applied %d updates, want %d", got, want)
	}
	for v := range 5 { // the base (before training) and each update's version were sampled
		if p := "tinker://" + model + "/sampler_weights/v" + string(rune('0'+v)); samples[p] == 0 {
			t.Fatalf("version %d (%s) was never sampled: %v", v, p, samples)
		}
	}
	before, after := sum.Evals[0], sum.Evals[len(sum.Evals)-1]
	if after.Version != 4 || reflect.DeepEqual(before.Envs, after.Envs) {
		t.Fatalf("the evaluation after training (version %d) is the base's: %+v", after.Version, after.Envs)
	}
	if n := strings.Count(strings.Join(calls, " "), "/api/v1/save_weights "); n < 3 {
		t.Fatalf("%d training states saved on the service for the checkpoints", n)
	}
	latest, err := os.ReadFile(filepath.Join(run.Dir, checkpointsDir, latestFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{strings.TrimSpace(string(latest)), bestName} {
		dir := run.checkpointDir(name)
		rc, err := checkpoint.ReadRemote(dir)
		if err != nil || rc == nil || !strings.HasPrefix(rc.Weights.Sampler, "tinker://"+model+"/sampler_weights/") {
			t.Fatalf("checkpoint %s: %+v %v", name, rc, err)
		}
		if _, err := checkpoint.Load(dir); !errors.Is(err, checkpoint.ErrRemoteWeights) {
			t.Fatalf("checkpoint %s loads as weights: %v", name, err)
		}
		if m, _ := filepath.Glob(filepath.Join(dir, "*.safetensors")); len(m) > 0 {
			t.Fatalf("checkpoint %s holds %v", name, m)
		}
	}

	// Stopped after step 2 (a checkpoint), then resumed on the service's saved state.
	cfg2 := tinkerRun(t, "test-ones", init, url, time.Minute)
	run2, err := NewRun(cfg2, Options{Envs: onesEnvs(), StopRL: func(_ string, step int, _ map[string]any) bool { return step == 2 }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run2.Train(context.Background()); !errors.Is(err, ErrStopped) {
		t.Fatalf("stopped run: %v", err)
	}
	resumed, err := Resume(run2.Dir, Options{Envs: onesEnvs()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := resumed.Train(context.Background()); err != nil {
		t.Fatal(err)
	}
	want, got := metricLines(t, run.Dir), metricLines(t, run2.Dir)
	if len(got) != len(want) {
		t.Fatalf("%d metric lines resumed, %d uninterrupted", len(got), len(want))
	}
	for i := range want {
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Fatalf("metrics line %d differs:\nresumed       %v\nuninterrupted %v", i+1, got[i], want[i])
		}
	}
}

// Faults of the service end the run with a clear error, never a hang: a service down at the
// start, samples past their deadline, a future that fails, a malformed sample answer, a resume
// whose training state the service no longer has.
func TestTinkerRunFaults(t *testing.T) {
	init, ck := tinkerBase(t, "calc")
	down := httptest.NewServer(http.NotFoundHandler())
	downURL := down.URL
	down.Close()
	svc, url := tinkerService(t, ck)
	cases := []struct {
		name  string
		url   string
		fault func()
		want  string
	}{
		{"service down at the start", downURL, func() {}, "learner (Tinker service"},
		{"samples past their deadline", url, func() { svc.Hang = map[string]bool{"/api/v1/asample": true} }, "no answer within"},
		{"a future that fails", url, func() { svc.Fail = map[string]string{"/api/v1/forward": "CUDA out of memory"} }, "CUDA out of memory"},
		{"a malformed sample", url, func() {
			svc.Sample = func(res map[string]any) map[string]any {
				res["sequences"].([]any)[0].(map[string]any)["stop_reason"] = "abort"
				return res
			}
		}, `stop_reason "abort"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			svc.Lock()
			svc.Hang, svc.Fail, svc.Sample = nil, nil, nil
			tc.fault()
			svc.Unlock()
			cfg := tinkerRun(t, "calc", init, tc.url, 2*time.Second)
			cfg.Eval.Tasks = 2
			run, err := NewRun(cfg, Options{Envs: onesEnvs()})
			if err != nil {
				t.Fatal(err)
			}
			t0 := time.Now()
			_, err = run.Train(context.Background())
			if err == nil || !strings.Contains(err.Error(), tc.want) || time.Since(t0) > time.Minute {
				t.Fatalf("err = %v after %v, want one naming %q", err, time.Since(t0), tc.want)
			}
		})
	}
	// A resume whose training state the service no longer has says which.
	svc.Lock()
	svc.Hang, svc.Fail, svc.Sample = nil, nil, nil
	svc.Unlock()
	cfg := tinkerRun(t, "calc", init, url, 2*time.Second)
	cfg.Eval.Tasks = 2
	run, err := NewRun(cfg, Options{Envs: onesEnvs(), StopRL: func(_ string, step int, _ map[string]any) bool { return step == 2 }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Train(context.Background()); !errors.Is(err, ErrStopped) {
		t.Fatalf("stopped run: %v", err)
	}
	svc.Lock()
	svc.Fail = map[string]string{"/api/v1/load_weights": "Checkpoint not found"}
	svc.Unlock()
	resumed, err := Resume(run.Dir, Options{Envs: onesEnvs()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := resumed.Train(context.Background()); err == nil || !strings.Contains(err.Error(), "resume: loading tinker://") || !strings.Contains(err.Error(), "Checkpoint not found") {
		t.Fatalf("resume without the training state: %v", err)
	}
}

// A service whose sampler tokenizes with another tokenizer than init's is refused at the start.
func TestTinkerTokenizerMismatch(t *testing.T) {
	r := &Run{}
	r.Cfg.Init = "hf:Qwen/Qwen3-4B-Instruct-2507"
	if err := r.checkTinkerTokenizer(tinker.ModelInfo{BaseModel: "meta-llama/Llama-3.1-8B", TokenizerID: "meta-llama/Llama-3.1-8B"}); err == nil || !strings.Contains(err.Error(), "would not mean the same") {
		t.Fatalf("another tokenizer: %v", err)
	}
	if err := r.checkTinkerTokenizer(tinker.ModelInfo{TokenizerID: "qwen/qwen3-4b-instruct-2507"}); err != nil {
		t.Fatalf("the same tokenizer: %v", err)
	}
	if err := r.checkTinkerTokenizer(tinker.ModelInfo{}); err != nil { // SkyRL's server names none
		t.Fatalf("no tokenizer named: %v", err)
	}
}

// The session's heartbeat reaches the service while the run goes on, and stops when told.
func TestTinkerHeartbeat(t *testing.T) {
	m, err := model.New(model.Config{Vocab: 32, Dim: 16, Layers: 1, Heads: 2, KVHeads: 1, Hidden: 32, MaxSeq: 32, RopeTheta: 10000, NormEps: 1e-5, TieEmbeddings: true}, 1)
	if err != nil {
		t.Fatal(err)
	}
	svc, url := tinkerService(t, &checkpoint.Checkpoint{Model: m})
	c, err := tinker.Dial(context.Background(), tinker.Options{URL: url, BaseModel: "agentrl/tiny", Rank: 2, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	s := &tinkerSession{client: c}
	s.stopBeat = s.heartbeat(10 * time.Millisecond)
	time.Sleep(100 * time.Millisecond)
	s.close()
	count := func() int {
		svc.Lock()
		defer svc.Unlock()
		return strings.Count(strings.Join(svc.Calls, " "), "session_heartbeat")
	}
	n := count()
	if n < 2 {
		t.Fatalf("%d heartbeats in 100ms at 10ms", n)
	}
	time.Sleep(50 * time.Millisecond)
	if count() != n {
		t.Fatal("heartbeats after the session closed")
	}
}
