package pipeline

import (
	"testing"

	"github.com/agentrl/agentrl/algo"
	"github.com/agentrl/agentrl/learn"
	"github.com/agentrl/agentrl/monitor"
)

// TestStepFieldsKeepTheirNames pins the metrics.jsonl names of an RL step that trained and of
// one that did not.
func TestStepFieldsKeepTheirNames(t *testing.T) {
	base := []string{"phase", "step", "version", "reward/mean", "reward/success", "episodes/sampled", "episodes/failed",
		"episodes/truncated", "episodes/turns", "episodes/response_len", "explore/tool_call_rate",
		"explore/distinct_per_group", "signal/zero_var_share", "signal/groups_kept", "signal/sample_rounds",
		"signal/partial_batch", "shift/behaviour_kl", "shift/is_mean", "shift/is_max", "shift/is_std", "shift/is_ess",
		"shift/version_lag_mean", "shift/version_lag_max", "signal/grad_norm",
		"signal/grad_norm_max", "signal/updates_skipped", "optim/lr", "loss/total", "time/generate_env_s",
		"time/generate_s", "time/env_s", "time/train_s", "time/step_s", "time/elapsed_s"}
	idle := (&rlStep{sample: monitor.Stats{Tools: map[string]float64{"calculator": 1}}}).fields()
	for _, k := range append(base, "explore/tool_mix/calculator") {
		if _, ok := idle[k]; !ok {
			t.Errorf("untrained step lacks %q", k)
		}
	}
	for _, k := range []string{"signal/effective_batch", "explore/entropy"} { // measured on trained tokens only
		if _, ok := idle[k]; ok {
			t.Errorf("untrained step reports %s", k)
		}
	}
	rep := &learn.RLReport{Estimator: algo.Metrics{"adv/mean": 0.5}, Advantages: algo.AdvantageSummary{Effective: 3, Spread: 1.5},
		Shift: algo.Shift{KL: 0.25}, RLStats: learn.RLStats{Metrics: algo.Metrics{"loss/policy": 2}, Entropy: 0.7}}
	m := (&rlStep{learn: rep}).fields()
	for k, want := range map[string]any{"adv/mean": 0.5, "signal/effective_batch": 3, "signal/adv_spread": 1.5,
		"shift/behaviour_kl": 0.25, "loss/policy": 2.0, "explore/entropy": 0.7, "signal/adv_mean_abs": 0.0} {
		if m[k] != want {
			t.Errorf("%s = %v (%T), want %v", k, m[k], m[k], want)
		}
	}
	if len(m) != len(idle)-1+6 { // no tool mix; + adv/mean, 3 advantage, loss/policy, entropy
		t.Errorf("trained step has %d fields, want %d", len(m), len(idle)-1+6)
	}
}
