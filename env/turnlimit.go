package env

import (
	"context"
	"fmt"
	"maps"
)

// turnLimitEnv is the WithTurnLimit wrapper.
type turnLimitEnv struct {
	inner    Env
	maxTurns int
	turns    int
	reset    bool
	done     bool
}

// WithTurnLimit ends an episode after maxTurns steps (tool turns included) that did not end it:
// the maxTurns-th step's transition comes back with Done, Reward 0 (a truncated episode earns no
// outcome reward) and Info[InfoTruncated] = TruncatedTurnLimit. Step after Done returns
// ErrEpisodeDone. It panics on maxTurns < 1, a programming error.
func WithTurnLimit(inner Env, maxTurns int) Env {
	if maxTurns < 1 {
		panic(fmt.Sprintf("env: WithTurnLimit: maxTurns %d < 1", maxTurns))
	}
	return &turnLimitEnv{inner: inner, maxTurns: maxTurns}
}

func (e *turnLimitEnv) Reset(ctx context.Context, seed int64) (Observation, error) {
	obs, err := e.inner.Reset(ctx, seed)
	if err != nil {
		return Observation{}, err
	}
	e.turns, e.reset, e.done = 0, true, false
	return obs, nil
}

func (e *turnLimitEnv) Step(ctx context.Context, action string) (Transition, error) {
	switch {
	case !e.reset:
		return Transition{}, ErrNotReset
	case e.done:
		return Transition{}, ErrEpisodeDone
	}
	tr, err := e.inner.Step(ctx, action)
	if err != nil {
		return tr, err
	}
	e.turns++
	if !tr.Done && e.turns >= e.maxTurns {
		tr.Done, tr.Reward = true, 0
		info := make(map[string]string, len(tr.Info)+2)
		maps.Copy(info, tr.Info)
		info[InfoTruncated] = TruncatedTurnLimit
		if _, ok := info[InfoSuccess]; !ok {
			info[InfoSuccess] = "false"
		}
		tr.Info = info
	}
	e.done = tr.Done
	return tr, nil
}

// Close closes inner.
func (e *turnLimitEnv) Close() error { return closeInner(e.inner) }
