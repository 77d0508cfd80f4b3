package config

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strings"

	"github.com/agentrl/agentrl/infer/remote"
	"github.com/agentrl/agentrl/reward"
)

// RewardConfig is an environment's reward: block in an rl phase (phases[].envs[].reward): the
// reward package's composition of the environment's own grade with format, overlong, process
// and progressive parts, and a judge, whose generator the run provides. Absent, episodes keep
// the reward the environment gave them.
type RewardConfig struct {
	reward.Config `yaml:",inline"`
	Judge         *JudgeConfig `yaml:"judge,omitempty"`
}

// Judge generators.
const (
	JudgePolicy     = "policy"     // the policy being trained, on the engine or servers that sample it
	JudgeCheckpoint = "checkpoint" // another checkpoint, loaded into a local engine of its own
	JudgeRemote     = "remote"     // inference servers (infer/remote)
)

// JudgeConfig is a judge part: a rubric answered by a generator, scored on [0, 1].
type JudgeConfig struct {
	Weight             float64 `yaml:"weight"`
	reward.JudgeConfig `yaml:",inline"`
	// MaxTokens bounds the judgement (greedy decoding, ended by the end-of-turn token).
	MaxTokens int `yaml:"max_tokens"`
	// Generator is policy, checkpoint or remote.
	Generator string `yaml:"generator"`
	// Checkpoint is the judge's checkpoint folder (generator checkpoint), or, for remote, the
	// folder whose tokenizer the servers' model uses (default: the run's tokenizer).
	Checkpoint string `yaml:"checkpoint,omitempty"`
	// Remote names the judge's servers (generator remote).
	Remote *remote.Config `yaml:"remote,omitempty"`
}

// MaxJudgeTokens bounds reward.judge.max_tokens.
const MaxJudgeTokens = 4096

// validate checks the block of environment name in phase p, with keys from "reward." down.
func (rc *RewardConfig) validate(c *Config, p *Phase) error {
	if p.Kind != "rl" {
		return fmt.Errorf("reward does nothing in an %s phase (supervised phases train on demonstrations, not rewards)", p.Kind)
	}
	if p.RL != nil && p.RL.Async != nil && p.RL.Async.Workers != nil && rc.Judge != nil && rc.Judge.Generator == JudgePolicy {
		return errors.New("reward.judge.generator: policy: with rollout workers (rl.async.workers) the learner holds no engine of the policy to judge with; use a checkpoint or remote judge")
	}
	var errs []error
	if err := rc.Config.Validate(c.Rollout.MaxContext, rc.Judge != nil); err != nil {
		errs = append(errs, prefixed("reward.", err)...)
	}
	if j := rc.Judge; j != nil {
		bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf("reward.judge."+format, a...)) }
		if j.Weight == 0 || math.IsNaN(j.Weight) || math.IsInf(j.Weight, 0) {
			bad("weight must be a finite non-zero weight, got %v (0 would make the judge count for nothing: remove the block)", j.Weight)
		}
		if err := j.JudgeConfig.Validate(); err != nil {
			errs = append(errs, prefixed("reward.judge.", err)...)
		}
		if strings.Contains(j.Rubric, ".Answer") {
			bad("rubric: {{.Answer}} is empty here: a trajectory carries no reference answer (use {{.Prompt}} and {{.Response}}; the environment's own grade is the outcome part)")
		}
		if j.MaxTokens < 1 || j.MaxTokens > MaxJudgeTokens {
			bad("max_tokens must be in [1, %d], got %d", MaxJudgeTokens, j.MaxTokens)
		}
		switch j.Generator {
		case JudgePolicy:
			if j.Checkpoint != "" || j.Remote != nil {
				bad("checkpoint and remote do nothing with generator: policy (the judge is the policy being trained)")
			}
		case JudgeCheckpoint:
			if j.Checkpoint == "" {
				bad("checkpoint must name the judge's checkpoint folder (generator: checkpoint)")
			} else if _, err := os.Stat(j.Checkpoint); err != nil {
				bad("checkpoint: %v", err)
			}
			if j.Remote != nil {
				bad("remote does nothing with generator: checkpoint")
			}
		case JudgeRemote:
			if j.Remote == nil {
				bad("remote must name the judge's servers (generator: remote)")
			} else if err := j.Remote.Validate("reward.judge.remote", false, true); err != nil {
				errs = append(errs, err)
			}
			if j.Checkpoint != "" {
				if _, err := os.Stat(j.Checkpoint); err != nil {
					bad("checkpoint (the servers' tokenizer): %v", err)
				}
			}
		default:
			bad("generator must be %s, %s or %s, got %q", JudgePolicy, JudgeCheckpoint, JudgeRemote, j.Generator)
		}
	}
	return errors.Join(errs...)
}

// prefixed splits a joined error and prefixes each part.
func prefixed(prefix string, err error) []error {
	var parts []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		parts = j.Unwrap()
	} else {
		parts = []error{err}
	}
	out := make([]error, len(parts))
	for i, e := range parts {
		out[i] = fmt.Errorf("%s%w", prefix, e)
	}
	return out
}

// fillRewardDefaults writes out the defaults of reward blocks (an absent outcome weight is 1),
// so that a saved or shown config says what the run does.
func fillRewardDefaults(c *Config) {
	for i := range c.Phases {
		for j := range c.Phases[i].Envs {
			if rc := c.Phases[i].Envs[j].Reward; rc != nil && rc.Outcome == nil {
				one := 1.0
				rc.Outcome = &one
			}
		}
	}
}
