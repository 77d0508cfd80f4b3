package env

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// timeoutEnv is the WithStepTimeout wrapper.
type timeoutEnv struct {
	inner    Env
	d        time.Duration
	poisoned bool // a call was abandoned while still running; inner must not be touched again
}

// WithStepTimeout runs every Reset and Step of inner under a deadline of d. A call still running
// at the deadline yields an error wrapping context.DeadlineExceeded; the caller gets it within d
// plus a short grace (at most 100 ms) even when inner ignores its context, because the call runs
// in its own goroutine.
//
// An inner call that has not returned by the end of the grace is abandoned and the instance is
// poisoned: every later Reset or Step returns ErrPoisoned, and the caller must Close it and make a
// new one. Close then closes inner while the abandoned call may still be running, so an
// environment that can hang must make Close safe to call concurrently and have it unblock the
// call (kill the process, drop the connection); until it does, that goroutine stays alive.
// It panics on d <= 0, a programming error.
func WithStepTimeout(inner Env, d time.Duration) Env {
	if d <= 0 {
		panic(fmt.Sprintf("env: WithStepTimeout: non-positive timeout %v", d))
	}
	return &timeoutEnv{inner: inner, d: d}
}

func (e *timeoutEnv) Reset(ctx context.Context, seed int64) (Observation, error) {
	return callWithin(e, ctx, "reset", func(ctx context.Context) (Observation, error) { return e.inner.Reset(ctx, seed) })
}

func (e *timeoutEnv) Step(ctx context.Context, action string) (Transition, error) {
	return callWithin(e, ctx, "step", func(ctx context.Context) (Transition, error) { return e.inner.Step(ctx, action) })
}

// Close closes inner, also when a call was abandoned (see WithStepTimeout).
func (e *timeoutEnv) Close() error { return closeInner(e.inner) }

// graceFor is how long to wait past the deadline for a call that honours its context to return
// on its own, so a cooperative environment is not poisoned by a race with the timer.
func graceFor(d time.Duration) time.Duration { return min(d, 100*time.Millisecond) }

type result[T any] struct {
	v   T
	err error
}

func callWithin[T any](e *timeoutEnv, ctx context.Context, what string, f func(context.Context) (T, error)) (T, error) {
	var zero T
	if e.poisoned {
		return zero, ErrPoisoned
	}
	dctx, cancel := context.WithTimeout(ctx, e.d)
	defer cancel()
	ch := make(chan result[T], 1) // buffered: an abandoned call can still send and exit
	go func() {
		v, err := f(dctx)
		ch <- result[T]{v, err}
	}()
	var r result[T]
	late := false
	select {
	case r = <-ch:
	case <-dctx.Done():
		late = true
		grace := time.NewTimer(graceFor(e.d))
		defer grace.Stop()
		select {
		case r = <-ch:
		case <-grace.C:
			e.poisoned = true
			if ctx.Err() != nil {
				return zero, fmt.Errorf("env: %s abandoned: %w", what, ctx.Err())
			}
			return zero, fmt.Errorf("env: %s did not return within %v: %w", what, e.d, context.DeadlineExceeded)
		}
	}
	if late && ctx.Err() == nil {
		// Our deadline passed, not the caller's: report a timeout whatever the call said, since
		// a late result came from a step the caller was told is too slow.
		if r.err == nil || !errors.Is(r.err, context.DeadlineExceeded) {
			return zero, fmt.Errorf("env: %s ran past %v: %w", what, e.d, errors.Join(context.DeadlineExceeded, r.err))
		}
		return zero, fmt.Errorf("env: %s ran past %v: %w", what, e.d, r.err)
	}
	return r.v, r.err
}
