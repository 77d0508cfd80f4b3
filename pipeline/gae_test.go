package pipeline

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/agentrl/agentrl/checkpoint"
	"github.com/agentrl/agentrl/config"
	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/env/all"
)

// gaeSets trains the tiny run on test-ones, 30 supervised steps on its expert (the policy then
// earns about 0.4 of the reward, so the critic has returns to learn) and an RL phase of PPO with
// GAE (the one --set gives gae its defaults and the critic term); two minibatches and two epochs
// put several updates of the value head in each step.
var gaeSets = []string{
	"phases.rl.rl.advantage.name=gae", "phases.rl.rl.dynamic_sampling=null",
	"phases.sft.envs=[{name: test-ones, weight: 1}]", "phases.rl.envs=[{name: test-ones, weight: 1}]",
	"rollout.max_turns=1", "rollout.max_tokens_per_turn=6", "phases.sft.steps=30", "phases.rl.optim.lr=0.003",
	"phases.rl.steps=6", "phases.rl.rl.minibatches=2", "phases.rl.rl.epochs=2",
}

// rlStepLines runs the config with the registry envs and returns the run and its RL step lines.
func rlStepLines(t *testing.T, c config.Config, envs *env.Registry) (*Run, []map[string]any) {
	t.Helper()
	run, err := NewRun(c, Options{Envs: envs})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Train(context.Background()); err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	for _, m := range metricLines(t, run.Dir) {
		if m["phase"] == "rl" && m["optim/lr"] != nil {
			out = append(out, m)
		}
	}
	return run, out
}

// PPO with GAE from the run config, on test-ones after a short supervised start on its expert
// (the policy then earns about 0.4 of the reward, so the critic has returns to learn from the
// first step): the policy gets a value head at the RL phase's start, every step reports the
// critic, the value loss falls as the head learns the returns while the rewards rise, and the
// head is saved with the phase's resume checkpoints (not with the weights-only ones).
func TestPPOGAEFromConfig(t *testing.T) {
	steps := 20
	if testing.Short() {
		steps = 12
	}
	envs := onesEnvs()
	optim := "optim: {lr: 0.003, min_lr_ratio: 1, warmup: 0, weight_decay: 0, grad_clip: 1, beta1: 0.9, beta2: 0.99}"
	c, err := config.Load(envs, "", "", []string{
		"runs_dir=" + t.TempDir(), "name=gae",
		"model.dim=32", "model.layers=1", "model.heads=2", "model.kv_heads=1", "model.hidden=64", "model.max_seq=64",
		"rollout.max_context=64", "rollout.max_tokens_per_turn=6", "rollout.max_turns=1", "rollout.engine_slots=32",
		"tokenizer.vocab_size=300", "tokenizer.corpus_samples=200",
		"phases=[{name: sft, kind: sft, envs: [{name: test-ones, weight: 1}], steps: 30, " + optim + ", " +
			"sft: {demos: 64, noise: 0.5, batch_size: 8, keep: all}}, " +
			"{name: rl, kind: rl, envs: [{name: test-ones, weight: 1}], steps: " + strconv.Itoa(steps) + ", " + optim + ", " +
			"rl: {groups_per_step: 4, group_size: 8, epochs: 1, minibatches: 1, advantage: {name: gae, gae: {gamma: 1, lambda: 0.95}}, " +
			"loss: {policy: ppo, ppo: {clip_low: 0.2, clip_high: 0.2}, agg: token-mean, critic: {coef: 0.5, clip: 0.5}}}}]",
		"eval.tasks=32", "checkpoint.every=4",
	})
	if err != nil {
		t.Fatal(err)
	}
	run, lines := rlStepLines(t, c, envs)
	if len(lines) != steps {
		t.Fatalf("%d RL step lines, want %d", len(lines), steps)
	}
	var loss, rew []float64
	for i, m := range lines {
		v, ok1 := m["critic/value_loss"].(float64)
		_, ok2 := m["critic/vf_clipfrac"].(float64)
		_, ok3 := m["adv/return_mean"].(float64)
		if !ok1 || !ok2 || !ok3 {
			t.Fatalf("step %d: critic metrics missing: %v", i+1, m)
		}
		t.Logf("step %d: reward %.3f value loss %.5f explained variance %v", i+1, m["reward/mean"], v, m["adv/value_explained_var"])
		loss = append(loss, v)
		rew = append(rew, m["reward/mean"].(float64))
	}
	mean := func(x []float64) float64 {
		s := 0.0
		for _, v := range x {
			s += v
		}
		return s / float64(len(x))
	}
	if first, last := mean(loss[:3]), mean(loss[steps-3:]); !(last < 0.5*first) {
		t.Fatalf("value loss %v: the last three steps' mean %v is not below half the first three's %v", loss, last, first)
	}
	if first, last := mean(rew[:3]), mean(rew[steps-3:]); !(last > first) {
		t.Fatalf("training reward %v: the last three steps' mean %v is not above the first three's %v", rew, last, first)
	}
	mid := (steps - 1) / 4 * 4 // the last checkpoint inside the phase
	ck, err := checkpoint.Load(run.checkpointDir(run.stepName(1, mid)))
	if err != nil {
		t.Fatal(err)
	}
	if !ck.Model.HasValueHead() || ck.Model.Params.ValueBias[0] == 0 || ck.State.Optimizer == nil {
		t.Fatalf("checkpoint at RL step %d: value head %v, bias %v", mid, ck.Model.HasValueHead(), ck.Model.Params.ValueBias)
	}
	if _, err := os.Stat(filepath.Join(run.checkpointDir(run.stepName(0, 30)), "value_head.safetensors")); !os.IsNotExist(err) {
		t.Fatalf("the SFT phase's checkpoint has a value head (stat: %v)", err)
	}
	if _, err := os.Stat(filepath.Join(run.checkpointDir(bestName), "value_head.safetensors")); !os.IsNotExist(err) {
		t.Fatalf("the weights-only best checkpoint has a value head (stat: %v)", err)
	}
}

// The same on calc, the default task: the tiny policy earns no reward there in a few steps, so
// this shows only that the wiring runs end to end on it (the critic's metrics, a value head in the
// checkpoint, updates with a gradient from the entropy bonus); TestPPOGAELearnsCalc measures
// learning.
func TestPPOGAEOnCalc(t *testing.T) {
	run, lines := rlStepLines(t, tinyConfig(t, t.TempDir(), "phases.rl.rl.advantage.name=gae", "phases.rl.rl.dynamic_sampling=null",
		"phases.rl.rl.loss.entropy_coef=0.01"), all.Builtins())
	if len(lines) != 4 {
		t.Fatalf("%d RL step lines, want 4", len(lines))
	}
	for i, m := range lines {
		if _, ok := m["critic/value_loss"].(float64); !ok || m["signal/effective_batch"] == nil || !(m["signal/grad_norm"].(float64) > 0) {
			t.Fatalf("step %d did not train PPO+GAE: %v", i+1, m)
		}
	}
	ck, err := checkpoint.Load(run.checkpointDir(run.stepName(1, 2)))
	if err != nil {
		t.Fatal(err)
	}
	if !ck.Model.HasValueHead() {
		t.Fatal("checkpoint rl-2 has no value head")
	}
}

// A run with PPO+GAE killed mid-phase resumes with the value head and its optimizer moments as
// they were, and writes the same metrics as a run never interrupted.
func TestResumeAfterKillWithGAE(t *testing.T) {
	testResumeAfterKill(t, gaeSets, []int{35, 37}) // RL steps 3 and 5 (after 32 lines: evaluation, 30 SFT steps, evaluation)
}

// Replaying a recorded PPO+GAE run trains the same updates: the values are recomputed from the
// policy (value head included) at each step, so every RL metric, the critic's among them, matches.
func TestReplayReproducesAGAERun(t *testing.T) {
	c := tinyConfig(t, t.TempDir(), append(gaeSets, "checkpoint.every=1", "checkpoint.keep=1")...)
	run, err := NewRun(c, Options{Envs: onesEnvs()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Train(context.Background()); err != nil {
		t.Fatal(err)
	}
	sum, err := Replay(context.Background(), run.Dir, ReplayOptions{OutDir: t.TempDir(), Opts: Options{Envs: onesEnvs()}})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Steps != 6 || sum.Compared != 6 || sum.Mismatch != "" {
		t.Fatalf("replayed %d steps, compared %d (want 6 and 6): %s", sum.Steps, sum.Compared, sum.Mismatch)
	}
	for _, m := range metricLines(t, sum.Dir) {
		if m["phase"] == "rl" && m["optim/lr"] != nil && !(m["critic/value_loss"].(float64) > 0) {
			t.Fatalf("a replayed step trained no critic: %v", m)
		}
	}
}

// An asynchronous phase trains PPO+GAE too: the values, like the proximal logprobs, are the
// learner's at training time.
func TestAsyncPhaseWithGAE(t *testing.T) {
	sets := append(slices.Clone(gaeSets), "phases.rl.rl.loss.correction.level=token", "phases.rl.rl.loss.correction.cap=2", "phases.rl.rl.async.max_staleness=1")
	_, lines := rlStepLines(t, tinyConfig(t, t.TempDir(), sets...), onesEnvs())
	if len(lines) != 6 {
		t.Fatalf("%d RL step lines, want 6", len(lines))
	}
	for i, m := range lines {
		if v, ok := m["critic/value_loss"].(float64); !ok || !(v > 0) || m["async/dropped_stale"] == nil {
			t.Fatalf("step %d did not train PPO+GAE asynchronously: %v", i+1, m)
		}
	}
}
