package monitor

import (
	"math/rand/v2"

	"github.com/agentrl/agentrl/config"
	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/rollout"
)

// SampleTasks draws n task seeds from the phase's environment mix (by weight) over the training
// seed ranges of the environments in reg.
func SampleTasks(reg *env.Registry, rng *rand.Rand, envs []config.EnvWeight, n int, groupBase uint64) ([]rollout.Task, error) {
	var total float64
	for _, e := range envs {
		total += e.Weight
	}
	tasks := make([]rollout.Task, n)
	for i := range tasks {
		u := rng.Float64() * total
		pick := envs[len(envs)-1].Name
		for _, e := range envs {
			if u < e.Weight {
				pick = e.Name
				break
			}
			u -= e.Weight
		}
		spec, err := reg.Lookup(pick)
		if err != nil {
			return nil, err
		}
		seed := spec.Train.Lo + rng.Int64N(spec.Train.Len())
		tasks[i] = rollout.Task{Env: pick, Seed: seed, GroupID: groupBase + uint64(i)}
	}
	return tasks, nil
}
