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

// lookupEnv answers the first action with a tool response, whatever it was, and grades the
// second as onesEnv does: every episode of two turns has tool-response tokens.
type lookupEnv struct{ turn int }

func (e *lookupEnv) Reset(context.Context, int64) (env.Observation, error) {
	e.turn = 0
	return env.Observation{Text: "Look up ones."}, nil
}

func (e *lookupEnv) Step(ctx context.Context, action string) (env.Transition, error) {
	e.turn++
	if e.turn == 1 {
		return env.Transition{Role: traj.RoleTool, Observation: "<tool_response>1111</tool_response>"}, nil
	}
	return (&onesEnv{}).Step(ctx, action)
}

func lookupEnvs() *env.Registry {
	r := all.Builtins()
	if err := r.Register(env.Spec{
		Name: "test-lookup", Description: "look up ones, then write them",
		New:     func() (env.Env, error) { return &lookupEnv{}, nil },
		Train:   env.SeedRange{Lo: 0, Hi: 1000},
		Heldout: env.SeedRange{Lo: 1000, Hi: 2000},
		Expert:  func(int64, float64, *rand.Rand) env.Agent { return onesExpert{} },
		Corpus: func(n int) []string {
			out := make([]string, n)
			for i := range out {
				out[i] = fmt.Sprintf("Look up ones. <tool_response>1111</tool_response> %d 1111", i)
			}
			return out
		},
	}); err != nil {
		panic(err)
	}
	return r
}

// lookupConfig is a tiny RL-only run on test-lookup with the advantage block adv.
func lookupConfig(t *testing.T, envs *env.Registry, adv string, sets ...string) (config.Config, error) {
	return config.Load(envs, "", "", append([]string{
		"runs_dir=" + t.TempDir(), "name=tooltokens",
		"model.dim=32", "model.layers=1", "model.heads=2", "model.kv_heads=1", "model.hidden=64", "model.max_seq=96",
		"rollout.max_context=96", "rollout.max_tokens_per_turn=6", "rollout.max_turns=2", "rollout.engine_slots=16",
		"tokenizer.vocab_size=300", "tokenizer.corpus_samples=200",
		"phases=[{name: rl, kind: rl, envs: [{name: test-lookup, weight: 1}], steps: 2, " +
			"optim: {lr: 0.003, min_lr_ratio: 1, warmup: 0, weight_decay: 0, grad_clip: 1, beta1: 0.9, beta2: 0.99}, " +
			"rl: {groups_per_step: 2, group_size: 4, epochs: 1, minibatches: 1, advantage: " + adv + ", " +
			"loss: {policy: ppo, ppo: {clip_low: 0.2, clip_high: 0.2}, agg: token-mean}}}]",
		"eval.tasks=4", "eval.samples=1",
	}, sets...))
}

// rl.train_tool_responses from the run config: the same first step (same seed, same weights, the
// same episodes) trains on the tool responses' tokens too, and the policy's entropy is still
// measured on its own tokens.
func TestTrainToolResponsesFromConfig(t *testing.T) {
	envs := lookupEnvs()
	first := map[bool]map[string]any{}
	for _, on := range []bool{false, true} {
		c, err := lookupConfig(t, envs, "{name: grpo}", fmt.Sprintf("phases.rl.rl.train_tool_responses=%v", on))
		if err != nil {
			t.Fatal(err)
		}
		_, lines := rlStepLines(t, c, envs)
		if len(lines) != 2 {
			t.Fatalf("train_tool_responses=%v: %d RL step lines, want 2", on, len(lines))
		}
		first[on] = lines[0]
	}
	off, on := first[false], first[true]
	if off["reward/mean"] != on["reward/mean"] || off["explore/entropy"] != on["explore/entropy"] {
		t.Fatalf("the first steps differ before training: reward %v / %v, entropy %v / %v", off["reward/mean"], on["reward/mean"], off["explore/entropy"], on["explore/entropy"])
	}
	// Every episode has one tool response: at least its tags' tokens each.
	nOff, nOn := off["loss/tokens"].(float64), on["loss/tokens"].(float64)
	if episodes := off["episodes/sampled"].(float64); nOn < nOff+2*episodes {
		t.Fatalf("loss tokens %v with tool responses, %v without, over %v episodes", nOn, nOff, episodes)
	}
	// Nothing sampled the tool's tokens: they count as on-policy (weight 1, KL 0) in the shift,
	// which can only fall, and are never taken for a behaviour logprob of 0.
	if kOff, kOn := off["shift/behaviour_kl"].(float64), on["shift/behaviour_kl"].(float64); !(kOn <= kOff) {
		t.Fatalf("behaviour KL %v with tool responses, %v without", kOn, kOff)
	}
}

// The estimators that credit turns apart, or bootstrap from values, are refused with the key.
func TestTrainToolResponsesRefusals(t *testing.T) {
	envs := lookupEnvs()
	for adv, want := range map[string]string{
		"{name: gigpo, gigpo: {gamma: 0.95, step_weight: 1}}": "credits each assistant turn apart",
		"{name: gae, gae: {gamma: 1, lambda: 0.95}}":          "bootstraps from the value",
	} {
		sets := []string{"phases.rl.rl.train_tool_responses=true"}
		if strings.Contains(adv, "gae") {
			sets = append(sets, "phases.rl.rl.loss.critic={coef: 0.5, clip: 0.5}")
		}
		_, err := lookupConfig(t, envs, adv, sets...)
		if err == nil || !strings.Contains(err.Error(), "rl.train_tool_responses") || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v, want one naming rl.train_tool_responses and %q", adv, err, want)
		}
	}
	if _, err := lookupConfig(t, envs, "{name: rloo}", "phases.rl.rl.train_tool_responses=true"); err != nil {
		t.Errorf("rloo: %v", err)
	}
}
