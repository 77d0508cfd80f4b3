package config

import (
	"testing"

	"github.com/agentrl/agentrl/env/all"
)

// Dynamic sampling runs on workers (item 2 of issue 29): the learner publishes its later rounds,
// numbered in the 16 bits a step's groups have on the wire, so only that many are refused.
func TestWorkersDynamicSampling(t *testing.T) {
	workers := []string{"phases.rl.rl.async={max_staleness: 1, workers: {listen: '127.0.0.1:0'}}", "phases.rl.rl.loss.correction.level=token"}
	c, err := Load(all.Builtins(), "", "", append(workers, "phases.rl.rl.dynamic_sampling={max_rounds: 4}"))
	if err != nil {
		t.Fatalf("dynamic sampling with workers: %v", err)
	}
	for _, p := range c.Phases {
		if p.Kind == "rl" && (p.RL.DynamicSampling == nil || p.RL.DynamicSampling.MaxRounds != 4) {
			t.Fatalf("phase %s: dynamic sampling %+v, want max_rounds 4", p.Name, p.RL.DynamicSampling)
		}
	}
	checkLoadErrors(t, []loadCase{{name: "more groups than the wire numbers",
		sets: append(workers, "phases.rl.rl.groups_per_step=2048", "phases.rl.rl.group_size=2", "phases.rl.rl.dynamic_sampling={max_rounds: 5}"),
		want: "groups_per_step 2048 × dynamic_sampling.max_rounds 5 groups a step exceed the 8192 the data plane numbers"}})
}
