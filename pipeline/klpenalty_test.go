package pipeline

import (
	"context"
	"testing"

	"github.com/agentrl/agentrl/env/all"
)

// klPenaltySets trains the RL phase with an entropy bonus (the tiny policy solves nothing, so
// without the penalty every advantage is 0 and only the bonus moves the policy away from its
// frozen start) and an adaptive k3 reward penalty.
var klPenaltySets = []string{
	"phases.rl.rl.dynamic_sampling=null", "phases.rl.rl.loss.entropy_coef=0.05", "phases.rl.steps=6",
	"phases.rl.rl.kl_penalty.estimator=k3", "phases.rl.rl.kl_penalty.coef=0.5",
	"phases.rl.rl.kl_penalty.adaptive.target=1e-6", "phases.rl.rl.kl_penalty.adaptive.horizon=16",
}

func rlLines(t *testing.T, sets ...string) []map[string]any {
	t.Helper()
	run, err := NewRun(tinyConfig(t, t.TempDir(), sets...), Options{Envs: all.Builtins()})
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
	if len(out) != 6 {
		t.Fatalf("%d RL step lines, want 6", len(out))
	}
	return out
}

// The KL penalty set in the run config is charged to the rewards: it appears in the metrics
// under kl/reward_…, its adaptive coefficient moves, and the advantages differ from the same run
// without it.
func TestKLPenaltyFromConfig(t *testing.T) {
	plain := rlLines(t, klPenaltySets[:3]...)
	pen := rlLines(t, klPenaltySets...)
	for i, m := range plain {
		if _, ok := m["kl/reward_coef"]; ok {
			t.Fatalf("step %d without a penalty reports kl/reward_coef", i+1)
		}
	}
	differ := false
	for i, m := range pen {
		coef, ok1 := m["kl/reward_coef"].(float64)
		next, ok2 := m["kl/reward_coef_next"].(float64)
		kl, ok3 := m["kl/reward_kl_mean"].(float64)
		if !ok1 || !ok2 || !ok3 {
			t.Fatalf("step %d: KL penalty metrics missing: %v", i+1, m)
		}
		if i == 0 && coef != 0.5 {
			t.Errorf("step 1: coefficient %v, want the configured 0.5", coef)
		}
		if i > 0 && coef != pen[i-1]["kl/reward_coef_next"] {
			t.Errorf("step %d: coefficient %v, want the previous step's next %v", i+1, coef, pen[i-1]["kl/reward_coef_next"])
		}
		if kl > 1e-6 && !(next > coef) {
			t.Errorf("step %d: KL %v above the target, yet the coefficient went %v → %v", i+1, kl, coef, next)
		}
		t.Logf("step %d: β %v → %v, KL %v, mean |A| %v (without %v)", i+1, coef, next, kl, m["signal/adv_mean_abs"], plain[i]["signal/adv_mean_abs"])
		if kl > 0 && m["signal/adv_mean_abs"] != plain[i]["signal/adv_mean_abs"] {
			differ = true
		}
	}
	if !differ {
		t.Fatalf("the penalty changed no advantage:\nwith    %v\nwithout %v", pen, plain)
	}
}

// A run with an adaptive penalty killed mid-phase resumes with the coefficient it had reached.
func TestResumeAfterKillWithKLPenalty(t *testing.T) {
	testResumeAfterKill(t, klPenaltySets, []int{11, 13})
}
