package pipeline

import (
	"bytes"
	"context"
	"github.com/agentrl/agentrl/config"
	"github.com/agentrl/agentrl/model"
	"strings"
	"testing"

	"github.com/agentrl/agentrl/env/all"
)

// bf16Sets sample the tiny run's RL phase with bfloat16 weights, corrected at token level.
var bf16Sets = []string{"rollout.precision.weights=bf16", "phases.rl.rl.loss.correction.level=token", "phases.rl.rl.loss.correction.cap=2"}

func TestPrecisionConfigErrors(t *testing.T) {
	const corr = "phases.rl.rl.loss.correction.level=token"
	for _, tc := range []struct {
		sets []string
		want string
	}{
		{[]string{"rollout.precision.weights=fp8"}, `rollout.precision.weights "fp8" must be "f32" (the default) or "bf16"`},
		{[]string{"rollout.precision.kv_cache=bf8"}, `rollout.precision.kv_cache "bf8" must be "f32" (the default) or "bf16"`},
		{[]string{"rollout.precision.kv_cache=bf16"}, "phases[1] (rl) must correct for it"},
		{[]string{"rollout.precision.weights=bf16"}, "phases[1] (rl) must correct for it with an importance correction against the behaviour logprobs (rl.loss.correction.level"},
		{[]string{"rollout.precision.weights=bf16", "phases.rl.kind=sft"}, "does nothing without an rl phase"},
		{[]string{"rollout.precision.weights=bf16", corr, "phases.rl.rl.async.max_staleness=1", "phases.rl.rl.dynamic_sampling=null", "phases.rl.rl.async.workers.listen=127.0.0.1:0"}, "samples on rollout workers (rl.async.workers), whose engines decode in f32"},
		{[]string{"rollout.precision.bogus=bf16"}, "bogus"},
	} {
		_, err := config.Load(all.Builtins(), "", "", tc.sets)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want %q", tc.sets, err, tc.want)
		}
	}
	c := tinyConfig(t, t.TempDir(), bf16Sets...)
	c.Rollout.Generator = generatorConfig("http://127.0.0.1:1")
	if err := c.Validate(all.Builtins()); err == nil || !strings.Contains(err.Error(), "with rollout.generator the inference servers sample") {
		t.Errorf("bf16 with a generator: error %v", err)
	}
	// f32 is the default and may be written out; a bf16 run with its correction loads and keeps
	// the block through a round trip.
	for _, sets := range [][]string{{"rollout.precision.weights=f32"}, bf16Sets, append([]string{"rollout.precision.kv_cache=bf16"}, bf16Sets...)} {
		c, err := config.Load(all.Builtins(), "", "", sets)
		if err != nil {
			t.Fatalf("%v: %v", sets, err)
		}
		data, err := config.Encode(c)
		if err != nil {
			t.Fatal(err)
		}
		back, err := config.Decode(data)
		if err != nil || back.Rollout.Precision == nil || *back.Rollout.Precision != *c.Rollout.Precision {
			t.Fatalf("%v: round trip gives %+v, %v", sets, back.Rollout.Precision, err)
		}
	}
	// One precision for both: rollout.precision: bf16.
	c, err := config.Load(all.Builtins(), "", "", append([]string{"rollout.precision=bf16"}, bf16Sets[1:]...))
	if err != nil {
		t.Fatal(err)
	}
	if p := c.Rollout.Precision; p == nil || p.Weights != model.BF16 || p.KVCache != model.BF16 {
		t.Fatalf("rollout.precision: bf16 reads as %+v, want bf16 weights and KV cache", p)
	}
	if _, err := config.Load(all.Builtins(), "", "", []string{"rollout.precision=fp8"}); err == nil || !strings.Contains(err.Error(), `precision "fp8"`) {
		t.Fatalf("rollout.precision: fp8: error %v", err)
	}
	if data, _ := config.Encode(tinyConfig(t, t.TempDir())); strings.Contains(string(data), "precision") {
		t.Fatalf("the default configuration writes a precision block:\n%s", data)
	}
}

// A run sampling with bfloat16 weights says so when it starts, trains through the correction,
// and measures a behaviour-vs-learner gap every step; the same run in f32 measures none.
func TestBF16RolloutRun(t *testing.T) {
	for _, bf16 := range []bool{false, true} {
		sets := []string{"phases.rl.rl.dynamic_sampling=null", "phases.rl.rl.loss.correction.level=token", "phases.rl.rl.loss.correction.cap=2"}
		if bf16 {
			sets = append(sets, "rollout.precision={weights: bf16, kv_cache: bf16}")
		}
		c := tinyConfig(t, t.TempDir(), sets...)
		var out bytes.Buffer
		run, err := NewRun(c, Options{Envs: testEnvs(), Out: &out})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := run.Train(context.Background()); err != nil {
			t.Fatal(err)
		}
		said := strings.Contains(out.String(), "RL episodes are sampled in bfloat16 (weights bf16, KV cache bf16")
		if said != bf16 {
			t.Fatalf("bf16 %v: the run's output says so: %v\n%s", bf16, said, out.String())
		}
		steps := 0
		for _, m := range metricLines(t, run.Dir) {
			if m["phase"] != "rl" {
				continue
			}
			steps++
			kl, std, ess := m["shift/behaviour_kl"].(float64), m["shift/is_std"].(float64), m["shift/is_ess"].(float64)
			if m["is/behav_kl"] == nil {
				t.Fatalf("step %v: the correction's own metrics are missing: %v", m["step"], m)
			}
			t.Logf("bf16 %v step %v: behaviour KL %.3g, IS std %.3g, ESS %.6f", bf16, m["step"], kl, std, ess)
			// In f32 the engine's logprobs are the learner's up to the float32 rounding of the
			// sampler's log-softmax (~1e-7); bfloat16 weights move them by orders of magnitude more.
			switch {
			case !bf16 && !(kl < 1e-12 && std < 1e-6):
				t.Fatalf("f32 step %v: behaviour KL %g, IS std %g; want none beyond rounding", m["step"], kl, std)
			case bf16 && !(kl > 1e-9 && kl < 1e-2 && std > 1e-5 && ess > 0.9):
				t.Fatalf("bf16 step %v: behaviour KL %g, IS std %g, ESS %g; want a small gap, well above rounding", m["step"], kl, std, ess)
			}
		}
		if steps != 4 {
			t.Fatalf("%d RL steps logged, want 4", steps)
		}
	}
}
