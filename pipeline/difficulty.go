package pipeline

import (
	"fmt"
	"slices"

	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/rollout"
)

// validateDifficulty checks e's difficulty block against the levels its environment has.
// Rollout workers get it with each task (dist.Task.EnvConfig, workerenv.go).
func (p *Phase) validateDifficulty(e EnvWeight, spec env.Spec) error {
	if e.Difficulty == nil {
		return nil
	}
	if err := e.Difficulty.Validate(spec.Levels); err != nil {
		return err
	}
	return nil
}

// phaseSpec is the spec of the environment name as the entries envs draw it: the registry's,
// with the run's MCP tools, at the entry's difficulty when it has one.
func (r *Run) phaseSpec(envs []EnvWeight, name string) (env.Spec, error) {
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
func (r *Run) phaseEnvs(envs []EnvWeight) rollout.EnvFactory {
	f := r.envFactory()
	if !slices.ContainsFunc(envs, func(e EnvWeight) bool { return e.Difficulty != nil }) {
		return f
	}
	return func(name string) (env.Env, error) {
		if !slices.ContainsFunc(envs, func(e EnvWeight) bool { return e.Name == name && e.Difficulty != nil }) {
			return f(name)
		}
		spec, err := r.phaseSpec(envs, name)
		if err != nil {
			return nil, err
		}
		return spec.New()
	}
}

// evalDifficulty is the difficulty an environment is evaluated at: every level any phase draws
// it at, in equal shares, so that every evaluation of the run poses the same tasks and reports
// success per level; nil when no phase sets one.
func (c *Config) evalDifficulty(name string) *env.Difficulty {
	var levels []int
	for _, p := range c.Phases {
		for _, e := range p.Envs {
			if e.Name == name && e.Difficulty != nil {
				levels = append(levels, e.Difficulty.Levels...)
			}
		}
	}
	if len(levels) == 0 {
		return nil
	}
	slices.Sort(levels)
	return &env.Difficulty{Levels: slices.Compact(levels)}
}

// describeDifficulty describes the difficulties of a phase's environments ("" when none).
func describeDifficulty(envs []EnvWeight) string {
	s := ""
	for _, e := range envs {
		if e.Difficulty != nil {
			if s != "" {
				s += "; "
			}
			s += fmt.Sprintf("%s at %s", e.Name, e.Difficulty)
		}
	}
	return s
}
