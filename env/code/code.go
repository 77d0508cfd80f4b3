// Package code is the "code" environment: the agent writes a short Python function for a task
// generated from the seed (arithmetic over lists, string transforms, counting, simple number
// theory), may try code with the sandboxed "python" tool, and answers with a fenced ```python
// block defining the function. The answer runs against hidden test cases in the same sandbox;
// the reward is 1 when every case passes and 0 otherwise, with the fraction passed in
// Info["passed"].
//
// The sandbox is required: New fails with a tool.ErrInfra error where it cannot run, and a
// sandbox failure while grading is a Step error (env_error), never a reward of 0. Code is never
// run outside the sandbox.
//
// The tasks are deliberately small (one-line statements, functions of a few lines) so the
// built-in tiny policy can learn them; the package does not aim at competitive-programming
// difficulty, nor grade style or speed.
package code

import (
	"errors"
	"fmt"
	"math/rand/v2"

	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/tool"
)

// Name is the registry name.
const Name = "code"

// Config tunes the environment. Zero fields take the defaults of DefaultConfig.
type Config struct {
	// Sandbox bounds every run, tool calls and grading alike.
	Sandbox tool.SandboxLimits
	// Tools bounds the tool calls of one turn.
	Tools env.ToolLimits
	// MaxTurns ends an episode that has not answered after this many turns (tool turns count).
	MaxTurns int
	// MaxAnswerBytes bounds the answer's code block.
	MaxAnswerBytes int
}

// DefaultConfig: the default sandbox limits, four turns, 16 KiB answers.
func DefaultConfig() Config {
	return Config{Sandbox: tool.DefaultSandboxLimits(), MaxTurns: 4, MaxAnswerBytes: 16 << 10}
}

// Validate reports the first unusable setting.
func (c Config) Validate() error {
	var errs []error
	if err := c.Sandbox.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Tools.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.MaxTurns < 1 {
		errs = append(errs, fmt.Errorf("code: max_turns must be at least 1, got %d", c.MaxTurns))
	}
	if c.MaxAnswerBytes < 1 {
		errs = append(errs, fmt.Errorf("code: max_answer_bytes must be positive, got %d", c.MaxAnswerBytes))
	}
	// The harness wraps the answer and must still fit the sandbox's source bound.
	if c.MaxAnswerBytes > 0 && c.Sandbox.CodeBytes > 0 && 2*c.MaxAnswerBytes+4096 > c.Sandbox.CodeBytes {
		errs = append(errs, fmt.Errorf("code: max_answer_bytes %d is too large for the sandbox's code_bytes %d (need 2x+4096)", c.MaxAnswerBytes, c.Sandbox.CodeBytes))
	}
	return errors.Join(errs...)
}

// New returns an environment with the python tool attached and a turn limit, or an error
// (wrapping tool.ErrInfra) when the sandbox cannot run here.
func New(cfg Config) (env.Env, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	sb, err := tool.NewSandbox(cfg.Sandbox)
	if err != nil {
		return nil, fmt.Errorf("code: %w", err)
	}
	inner := &codeEnv{sb: sb, maxAnswer: cfg.MaxAnswerBytes}
	return env.WithTurnLimit(env.WithTools(inner, []tool.Tool{tool.NewPython(sb)}, cfg.Tools), cfg.MaxTurns), nil
}

// Seed ranges: disjoint, and large enough that training never repeats a task.
var (
	trainSeeds   = env.SeedRange{Lo: 0, Hi: 1 << 40}
	heldoutSeeds = env.SeedRange{Lo: 1 << 40, Hi: 1<<40 + 1<<20}
)

// Spec describes the environment for an env.Registry.
func Spec() env.Spec {
	return env.Spec{
		Name:        Name,
		Description: "write a short Python function; hidden tests run in a sandbox; python tool",
		New:         func() (env.Env, error) { return New(DefaultConfig()) },
		Train:       trainSeeds,
		Heldout:     heldoutSeeds,
		Expert: func(seed int64, noise float64, rng *rand.Rand) env.Agent {
			return NewExpert(seed, noise, rng)
		},
		Corpus: Corpus,
	}
}
