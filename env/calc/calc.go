// Package calc is the built-in arithmetic environment and the default task of `agentrl train`:
// a question such as "What is 4821 * 37 + 9912?" (1–3 operators, 2–5 digit operands), a
// calculator tool, and a reward of 1 for the exact answer, 0 otherwise.
//
// It is designed to be learned by a 1–5 M parameter transformer on a CPU in minutes: prompts and
// observations are a handful of tokens, the expert's solution is two short turns (one calculator
// call with the whole expression, then "Answer: N"), and the skill is copying — the expression
// into the call, the tool's result into the answer — which supervised warm-up on the noisy
// expert teaches and RL then sharpens (the noisy expert skips the tool or slips a digit).
//
// The same tasks come without the calculator as "calc-notool" (NoToolSpec): the text-only
// baseline of tool-integrated RL (ReTool, arXiv 2504.11536), whose expert writes the answer
// directly. Both have difficulty levels, the number of operators (Levels).
//
// It does not grade partial credit, accept approximate answers, or teach arithmetic itself.
package calc

import (
	"context"
	"math/big"
	"strconv"

	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/reward"
	"github.com/agentrl/agentrl/tool"
	"github.com/agentrl/agentrl/traj"
)

// MaxTurns bounds an episode: the expert needs two (call, answer); two more allow a retry.
const MaxTurns = 4

// SystemPrompt is the one-line instruction; WithTools appends the calculator's description.
const SystemPrompt = "Use the calculator, then reply: Answer: <number>"

// SystemPromptNoTool is the instruction of calc-notool, which has no tool.
const SystemPromptNoTool = "Reply: Answer: <number>"

// InfoAnswer is the Info key holding the exact answer on the final transition.
const InfoAnswer = "answer"

// Env is the bare task: Reset poses the question, the first Step is the answer and ends the
// episode. New wraps it with the calculator and the turn limit; use Env directly only to build a
// different wrapping.
type Env struct {
	task        Task
	v           variant
	reset, done bool
}

// variant is one form of the environment: its tasks' level (0: the default mix of 1–3
// operators) and whether the calculator is left out (calc-notool).
type variant struct {
	level  int
	noTool bool
}

// New returns the environment as registered: the task with the calculator attached and a limit
// of MaxTurns turns.
func New() (env.Env, error) { return variant{}.new() }

// NewNoTool returns calc-notool as registered: the same tasks with no tool, answered in the
// first turn.
func NewNoTool() (env.Env, error) { return variant{noTool: true}.new() }

func (v variant) new() (env.Env, error) {
	if v.noTool {
		return env.WithTurnLimit(&Env{v: v}, MaxTurns), nil
	}
	calc, err := tool.NewCalculator(tool.CalcLimits{})
	if err != nil {
		return nil, err
	}
	return env.WithTurnLimit(env.WithTools(&Env{v: v}, []tool.Tool{calc}, env.ToolLimits{}), MaxTurns), nil
}

// Reset poses the question of seed.
func (e *Env) Reset(_ context.Context, seed int64) (env.Observation, error) {
	e.task = newTask(seed, e.v.level)
	e.reset, e.done = true, false
	sys := SystemPrompt
	if e.v.noTool {
		sys = SystemPromptNoTool
	}
	return env.Observation{System: sys, Text: e.task.Question}, nil
}

// Step grades action as the final answer with reward.ExactNumber (the last number in it, equal to
// the exact answer as a rational) and ends the episode. The
// closing observation is empty: nothing after the answer is trained on, so it costs no tokens.
func (e *Env) Step(_ context.Context, action string) (env.Transition, error) {
	switch {
	case !e.reset:
		return env.Transition{}, env.ErrNotReset
	case e.done:
		return env.Transition{}, env.ErrEpisodeDone
	}
	e.done = true
	score := reward.ExactNumber{}.Against(e.task.Answer, action)
	return env.Transition{
		Role:   traj.RoleEnv,
		Reward: score,
		Done:   true,
		Info:   map[string]string{env.InfoSuccess: strconv.FormatBool(reward.Solved(score)), InfoAnswer: tool.FormatRat(e.task.Answer)},
	}, nil
}

// Answer returns the exact answer of the current task (nil before Reset).
func (e *Env) Answer() *big.Rat {
	if !e.reset {
		return nil
	}
	return new(big.Rat).Set(e.task.Answer)
}
