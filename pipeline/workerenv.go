package pipeline

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/agentrl/agentrl/config"
	"github.com/agentrl/agentrl/dist"
	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/traj"
)

// taskEnvConfig is what a distributed phase's task says of its environment (dist.Task.EnvConfig).
type taskEnvConfig struct {
	Difficulty *env.Difficulty `json:"difficulty,omitempty"`
}

// distEnvConfigs are the task environment settings of phase p's environments, by name (absent:
// the environment as registered).
func distEnvConfigs(p config.Phase) (map[string]json.RawMessage, error) {
	out := map[string]json.RawMessage{}
	for _, e := range p.Envs {
		if e.Difficulty == nil {
			continue
		}
		b, err := json.Marshal(taskEnvConfig{Difficulty: e.Difficulty})
		if err != nil {
			return nil, err
		}
		out[e.Name] = b
	}
	return out, nil
}

// workerEnv makes a task's environment on a worker: the registry's, at the difficulty the task
// carries.
func workerEnv(envs *env.Registry, task dist.Task) (env.Env, error) {
	if len(task.EnvConfig) == 0 {
		return envs.New(task.Env)
	}
	var c taskEnvConfig
	dec := json.NewDecoder(bytes.NewReader(task.EnvConfig))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("task %s: env_config: %w", task.TaskID, err)
	}
	if c.Difficulty == nil {
		return envs.New(task.Env)
	}
	spec, err := envs.Lookup(task.Env)
	if err != nil {
		return nil, err
	}
	mix, err := env.WithDifficulty(spec, *c.Difficulty)
	if err != nil {
		return nil, fmt.Errorf("task %s: %w", task.TaskID, err)
	}
	return mix.New()
}

// hasLevel says whether a trajectory records the difficulty level it ran at.
func hasLevel(t *traj.Trajectory) bool {
	return slices.ContainsFunc(t.Meta, func(kv traj.KV) bool { return kv.Key == env.InfoLevel })
}
