package remote

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/traj"
)

// guessEnv is the test task: guess a number in [0, hi), hi in [64, 128), from "higher"/"lower" hints within 8
// steps. Special actions exercise the server: "crash" fails like broken infrastructure, "hang"
// blocks until the context ends or release is closed, "nan" answers with a NaN reward, and
// anything starting with "echo " is echoed back byte for byte.
type guessEnv struct {
	release chan struct{}
	closed  *atomic.Int64

	target, hi  int
	steps       int
	reset, done bool
}

const guessMaxSteps = 8

// guessTask is the task of seed: the range [0, hi) and the number.
func guessTask(seed int64) (hi, target int) {
	rng := rand.New(rand.NewPCG(uint64(seed), 7))
	hi = 64 + rng.IntN(64)
	return hi, rng.IntN(hi)
}

func (e *guessEnv) Reset(_ context.Context, seed int64) (env.Observation, error) {
	e.hi, e.target = guessTask(seed)
	e.steps, e.reset, e.done = 0, true, false
	return env.Observation{System: "Guess the number. Answer with one integer.",
		Text: fmt.Sprintf("I think of a number in [0, %d).", e.hi)}, nil
}

func (e *guessEnv) Step(ctx context.Context, action string) (env.Transition, error) {
	switch {
	case !e.reset:
		return env.Transition{}, env.ErrNotReset
	case e.done:
		return env.Transition{}, env.ErrEpisodeDone
	case action == "crash":
		return env.Transition{}, errors.New("guess: the simulator crashed")
	case action == "hang":
		select {
		case <-ctx.Done():
			return env.Transition{}, fmt.Errorf("guess: hung: %w", ctx.Err())
		case <-e.release:
			return env.Transition{}, errors.New("guess: released")
		}
	case action == "nan":
		return env.Transition{Observation: "odd", Role: traj.RoleEnv, Reward: math.NaN()}, nil
	case strings.HasPrefix(action, "echo "):
		return env.Transition{Observation: action, Role: traj.RoleTool,
			ToolCalls: []traj.ToolCall{{Name: "echo", Arguments: action}}, Info: map[string]string{"raw": action}}, nil
	}
	e.steps++
	n, err := strconv.Atoi(strings.TrimSpace(action))
	tr := env.Transition{Role: traj.RoleEnv}
	switch {
	case err != nil:
		tr.Observation = "Answer with one integer."
	case n == e.target:
		tr.Observation, tr.Reward, tr.Done = "Correct.", 1, true
		tr.Info = map[string]string{env.InfoSuccess: "true"}
	case n < e.target:
		tr.Observation = "higher"
	default:
		tr.Observation = "lower"
	}
	if !tr.Done && e.steps >= guessMaxSteps {
		tr.Done = true
		tr.Info = map[string]string{env.InfoSuccess: "false"}
	}
	e.done = tr.Done
	return tr, nil
}

func (e *guessEnv) Close() error {
	if e.closed != nil {
		e.closed.Add(1)
	}
	return nil
}

// guessExpert bisects; with probability noise it guesses at random inside the interval.
type guessExpert struct {
	lo, hi, last int
	noise        float64
	rng          *rand.Rand
}

func (a *guessExpert) Act(_ context.Context, obs string) (string, error) {
	switch obs {
	case "higher":
		a.lo = a.last + 1
	case "lower":
		a.hi = a.last
	}
	a.last = (a.lo + a.hi) / 2
	if a.noise > 0 && a.rng.Float64() < a.noise && a.hi > a.lo {
		a.last = a.lo + a.rng.IntN(a.hi-a.lo)
	}
	return strconv.Itoa(a.last), nil
}

// guessSpec returns the spec; news counts New calls, closes counts Close calls.
func guessSpec(release chan struct{}, news, closes *atomic.Int64) env.Spec {
	return env.Spec{
		Name: "guess", Description: "Guess a number from higher/lower hints.",
		Train: env.SeedRange{Lo: 0, Hi: 1000}, Heldout: env.SeedRange{Lo: 1000, Hi: 1100},
		New: func() (env.Env, error) {
			if news != nil {
				news.Add(1)
			}
			return &guessEnv{release: release, closed: closes}, nil
		},
		Expert: func(seed int64, noise float64, rng *rand.Rand) env.Agent {
			hi, _ := guessTask(seed)
			return &guessExpert{hi: hi, noise: noise, rng: rng}
		},
		Corpus: func(n int) []string {
			out := make([]string, n)
			for i := range out {
				out[i] = fmt.Sprintf("I think of a number in [0, %d). higher lower Correct.", i)
			}
			return out
		},
	}
}
