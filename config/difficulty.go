package config

import (
	"fmt"
	"slices"

	"github.com/agentrl/agentrl/env"
)

// validateDifficulty checks e's difficulty block against the levels its environment has.
// Rollout workers get it with each task (dist.Task.EnvConfig, pipeline/workerenv.go).
func (p *Phase) validateDifficulty(e EnvWeight, spec env.Spec) error {
	if e.Difficulty == nil {
		return nil
	}
	if err := e.Difficulty.Validate(spec.Levels); err != nil {
		return err
	}
	return nil
}

// EvalDifficulty is the difficulty an environment is evaluated at: every level any phase draws
// it at, in equal shares, so that every evaluation of the run poses the same tasks and reports
// success per level; nil when no phase sets one.
func (c *Config) EvalDifficulty(name string) *env.Difficulty {
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

// DescribeDifficulty describes the difficulties of a phase's environments ("" when none).
func DescribeDifficulty(envs []EnvWeight) string {
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
