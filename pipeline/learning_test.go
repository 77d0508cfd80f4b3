package pipeline

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/agentrl/agentrl/config"
	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/env/all"
	"github.com/agentrl/agentrl/traj"
)

// onesEnv rewards the share of characters of the answer that are "1": a dense signal that a
// randomly initialised policy receives from its first step, so RL's effect shows in a few steps.
type onesEnv struct{ seed int64 }

func (e *onesEnv) Reset(_ context.Context, seed int64) (env.Observation, error) {
	e.seed = seed
	return env.Observation{Text: fmt.Sprintf("Write ones. %d", seed)}, nil
}

func (e *onesEnv) Step(_ context.Context, action string) (env.Transition, error) {
	n := 0
	for _, r := range action {
		if r == '1' {
			n++
		}
	}
	score := float64(n) / float64(max(len([]rune(action)), 4))
	return env.Transition{Role: traj.RoleEnv, Done: true, Reward: score,
		Info: map[string]string{env.InfoSuccess: fmt.Sprint(score >= 0.5)}}, nil
}

type onesExpert struct{}

func (onesExpert) Act(context.Context, string) (string, error) { return "1111", nil }

// onesEnvs is the built-in environments and test-ones.
func onesEnvs() *env.Registry {
	r := all.Builtins()
	if err := r.Register(env.Spec{
		Name: "test-ones", Description: "write the digit 1",
		New:     func() (env.Env, error) { return &onesEnv{}, nil },
		Train:   env.SeedRange{Lo: 0, Hi: 1000},
		Heldout: env.SeedRange{Lo: 1000, Hi: 2000},
		Expert:  func(int64, float64, *rand.Rand) env.Agent { return onesExpert{} },
		Corpus: func(n int) []string {
			out := make([]string, n)
			for i := range out {
				out[i] = fmt.Sprintf("Write ones. %d 1111 answer %d", i, i*7)
			}
			return out
		},
	}); err != nil {
		panic(err)
	}
	return r
}

// RL alone, from random weights, raises held-out reward on a fixed task set within a few steps.
// The assertion counts steps, never seconds; the seed makes the run the same every time.
func TestRLRaisesRewardOnFixedTasks(t *testing.T) {
	envs := onesEnvs()
	c, err := config.Load(envs, "", "", []string{
		"runs_dir=" + t.TempDir(), "name=learn",
		"model.dim=32", "model.layers=1", "model.heads=2", "model.kv_heads=1", "model.hidden=64", "model.max_seq=64",
		"rollout.max_context=64", "rollout.max_tokens_per_turn=6", "rollout.max_turns=1", "rollout.engine_slots=32",
		"tokenizer.vocab_size=300", "tokenizer.corpus_samples=200",
		"phases=[{name: rl, kind: rl, envs: [{name: test-ones, weight: 1}], steps: 15, " +
			"optim: {lr: 0.01, min_lr_ratio: 1, warmup: 0, weight_decay: 0, grad_clip: 1, beta1: 0.9, beta2: 0.99}, " +
			"rl: {groups_per_step: 4, group_size: 8, epochs: 1, minibatches: 1, advantage: {name: grpo}, loss: {policy: ppo, ppo: {clip_low: 0.2, clip_high: 0.2}, agg: token-mean}}}]",
		"eval.tasks=32",
	})
	if err != nil {
		t.Fatal(err)
	}
	run, err := NewRun(c, Options{Envs: envs})
	if err != nil {
		t.Fatal(err)
	}
	sum, err := run.Train(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	before, after := sum.Evals[0].Envs[0], sum.Evals[len(sum.Evals)-1].Envs[0]
	t.Logf("held-out success %.2f -> %.2f", before.Pass1Greedy, after.Pass1Greedy)
	if !(after.Pass1Greedy >= before.Pass1Greedy+0.5) {
		t.Fatalf("held-out success went from %.2f to %.2f in 15 RL steps; want a rise of at least 0.5", before.Pass1Greedy, after.Pass1Greedy)
	}
	lines := metricLines(t, run.Dir)
	var first, last float64
	for _, m := range lines {
		if m["phase"] == "rl" {
			r := m["reward/mean"].(float64)
			if m["step"].(float64) == 1 {
				first = r
			}
			last = r
		}
	}
	if !(last > first) {
		t.Fatalf("training reward %v at step 1, %v at the last step", first, last)
	}
	if strings.Contains(fmt.Sprint(lines), "NaN") {
		t.Fatal("metrics contain NaN")
	}
}
