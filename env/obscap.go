package env

import (
	"context"
	"fmt"
)

// obsCapEnv is the WithObservationCap wrapper.
type obsCapEnv struct {
	inner    Env
	maxBytes int
}

// WithObservationCap cuts every observation the agent reads (Reset's Text and each Transition's
// Observation) to at most maxBytes bytes on a rune boundary, ending cut text with "…[truncated]".
// The system prompt is not cut: it is the environment's own text, not the world's. It panics on
// maxBytes < 1, a programming error.
func WithObservationCap(inner Env, maxBytes int) Env {
	if maxBytes < 1 {
		panic(fmt.Sprintf("env: WithObservationCap: maxBytes %d < 1", maxBytes))
	}
	return &obsCapEnv{inner: inner, maxBytes: maxBytes}
}

func (e *obsCapEnv) Reset(ctx context.Context, seed int64) (Observation, error) {
	obs, err := e.inner.Reset(ctx, seed)
	obs.Text = truncate(obs.Text, e.maxBytes)
	return obs, err
}

func (e *obsCapEnv) Step(ctx context.Context, action string) (Transition, error) {
	tr, err := e.inner.Step(ctx, action)
	tr.Observation = truncate(tr.Observation, e.maxBytes)
	return tr, err
}

// Close closes inner.
func (e *obsCapEnv) Close() error { return closeInner(e.inner) }
