package pipeline

import (
	"slices"

	"github.com/agentrl/agentrl/config"
	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/rollout"
)

// phaseSpec is the spec of the environment name as the entries envs draw it: the registry's,
// with the run's MCP tools, at the entry's difficulty when it has one.
func (r *Run) phaseSpec(envs []config.EnvWeight, name string) (env.Spec, error) {
	spec, err := r.opts.Envs.Lookup(name)
	if err != nil {
		return env.Spec{}, err
	}
	for _, e := range envs {
		if e.Name == name && e.Difficulty != nil {
			return env.WithDifficulty(r.mcp.Spec(spec), *e.Difficulty)
		}
	}
	return spec, nil
}

// phaseEnvs makes the episodes' environments of the entries envs: envFactory's, and those of
// an entry with a difficulty drawn at its levels.
func (r *Run) phaseEnvs(envs []config.EnvWeight) rollout.EnvFactory {
	f := r.envFactory()
	if !slices.ContainsFunc(envs, func(e config.EnvWeight) bool { return e.Difficulty != nil }) {
		return f
	}
	return func(name string) (env.Env, error) {
		if !slices.ContainsFunc(envs, func(e config.EnvWeight) bool { return e.Name == name && e.Difficulty != nil }) {
			return f(name)
		}
		spec, err := r.phaseSpec(envs, name)
		if err != nil {
			return nil, err
		}
		e, err := spec.New()
		return r.withToolFormat(e), err
	}
}
