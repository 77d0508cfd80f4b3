package pipeline

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/agentrl/agentrl/config"
	"github.com/agentrl/agentrl/infer"
	"github.com/agentrl/agentrl/learn"
)

// A run whose updates break the weights stops with an error that says so, instead of going on
// with every episode failing (env_error) and exiting as if it had trained.
func TestRunStopsOnBrokenWeights(t *testing.T) {
	envs := onesEnvs()
	c, err := config.Load(envs, "", "", []string{
		"runs_dir=" + t.TempDir(), "name=broken",
		"model.dim=32", "model.layers=1", "model.heads=2", "model.kv_heads=1", "model.hidden=64", "model.max_seq=64",
		"rollout.max_context=64", "rollout.max_tokens_per_turn=6", "rollout.max_turns=1", "rollout.engine_slots=8",
		"tokenizer.vocab_size=300", "tokenizer.corpus_samples=50",
		// A learning rate so large that the first update sends the weights to ±1e30.
		"phases=[{name: rl, kind: rl, envs: [{name: test-ones, weight: 1}], steps: 4, " +
			"optim: {lr: 1e30, min_lr_ratio: 1, warmup: 0, weight_decay: 0, grad_clip: 1, beta1: 0.9, beta2: 0.99}, " +
			"rl: {groups_per_step: 2, group_size: 4, epochs: 1, minibatches: 1, advantage: {name: grpo}, loss: {policy: ppo, ppo: {clip_low: 0.2, clip_high: 0.2}, agg: token-mean}}}]",
		"eval.tasks=4",
	})
	if err != nil {
		t.Fatal(err)
	}
	run, err := NewRun(c, Options{Envs: envs})
	if err != nil {
		t.Fatal(err)
	}
	_, err = run.Train(context.Background())
	if !errors.Is(err, infer.ErrNonFinite) && !errors.Is(err, learn.ErrBrokenWeights) {
		t.Fatalf("Train: %v, want it stopped for broken weights", err)
	}
	if !strings.Contains(err.Error(), "non-finite") {
		t.Fatalf("error %q does not say what broke", err)
	}
	t.Log(err)
}
