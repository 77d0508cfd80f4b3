package code

import (
	"context"
	"fmt"
	"math/rand/v2"

	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/reward"
	"github.com/agentrl/agentrl/tool"
	"github.com/agentrl/agentrl/traj"
)

// System is the system prompt; WithTools appends the python tool's description.
const System = "Solve the task with a Python function. You may run code with the python tool. " +
	"Finish with one ```python block that defines the function."

// Info keys this environment sets on the final transition, besides env.InfoSuccess.
const (
	InfoPassed = "passed" // "k/n" hidden cases passed
	InfoFamily = "family" // the task family: list, string, count, number
	InfoReason = "reason" // why an answer earned nothing before any case ran
)

// codeEnv is the task env without tools: Step grades the agent's answer.
type codeEnv struct {
	sb        *tool.Sandbox
	maxAnswer int

	prob  *problem
	nonce string
	done  bool
}

// nonceSalt separates the nonce stream from the problem stream.
const nonceSalt = 0x6e6f6e6365

func (e *codeEnv) Reset(_ context.Context, seed int64) (env.Observation, error) {
	e.prob = newProblem(seed)
	// The nonce only frames the harness's lines among whatever else reaches stdout; forging
	// it gains nothing (see harness), so a seeded stream keeps episodes reproducible.
	r := rand.New(rand.NewPCG(uint64(seed), nonceSalt))
	e.nonce = fmt.Sprintf("#%016x", r.Uint64())
	e.done = false
	return env.Observation{System: System, Text: e.prob.prompt()}, nil
}

func (e *codeEnv) Step(ctx context.Context, action string) (env.Transition, error) {
	switch {
	case e.prob == nil:
		return env.Transition{}, env.ErrNotReset
	case e.done:
		return env.Transition{}, env.ErrEpisodeDone
	}
	answer, err := extractAnswer(action, e.maxAnswer)
	if err != nil {
		e.done = true
		return e.final(verdict{total: len(e.prob.cases)}, err), nil
	}
	prog, err := harness(e.prob, answer, e.nonce)
	if err != nil {
		return env.Transition{}, err
	}
	if len(prog) > e.sb.Limits().CodeBytes {
		e.done = true
		return e.final(verdict{total: len(e.prob.cases)}, fmt.Errorf("%w: the graded program would be %d bytes", errAnswerSize, len(prog))), nil
	}
	res, err := e.sb.Run(ctx, prog)
	if err != nil {
		// A sandbox failure or cancellation is not the answer's fault: no reward is given
		// and the episode is recorded as an env error.
		return env.Transition{}, fmt.Errorf("code: grading: %w", err)
	}
	e.done = true
	v, perr := parseVerdict(e.prob, res.Stdout, e.nonce)
	if perr != nil && res.Limit != tool.LimitNone {
		perr = fmt.Errorf("%w (%s limit exceeded)", perr, res.Limit)
	}
	return e.final(v, perr), nil
}

// final is the transition that ends the episode.
func (e *codeEnv) final(v verdict, reason error) env.Transition {
	score := 0.0
	if reason == nil && v.load == "" {
		score = reward.Cases{}.Grade(v.passed, v.total)
	}
	success := reward.Solved(score)
	info := map[string]string{
		env.InfoSuccess: fmt.Sprint(success),
		InfoPassed:      fmt.Sprintf("%d/%d", v.passed, v.total),
		InfoFamily:      e.prob.family,
	}
	obs := fmt.Sprintf("Passed %d of %d tests.", v.passed, v.total)
	switch {
	case reason != nil:
		info[InfoReason] = reason.Error()
		obs = "No tests passed: " + reason.Error() + "."
	case v.load != "":
		info[InfoReason] = "answer did not load: " + v.load
		obs = fmt.Sprintf("The answer did not define %s (%s).", e.prob.fn, v.load)
	case success:
		obs = fmt.Sprintf("All %d tests passed.", v.total)
	}
	return env.Transition{Observation: obs, Role: traj.RoleEnv, Reward: score, Done: true, Info: info}
}

// Close releases nothing: every sandbox run is its own process, gone when the run ends.
func (e *codeEnv) Close() error { return nil }
