package env

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"
)

func TestWithTurnLimit(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		actions   []string
		max       int
		truncated bool
	}{
		{"ends itself", []string{"a", "done"}, 3, false},
		{"ends on the last allowed turn", []string{"a", "b", "done"}, 3, false},
		{"cut", []string{"a", "b", "c"}, 3, true},
		{"one turn", []string{"a"}, 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inner := &echoEnv{}
			e := WithTurnLimit(inner, tc.max)
			if _, err := e.Reset(ctx, 0); err != nil {
				t.Fatal(err)
			}
			var tr Transition
			for i, a := range tc.actions {
				var err error
				if tr, err = e.Step(ctx, a); err != nil {
					t.Fatal(err)
				}
				if tr.Done != (i == len(tc.actions)-1) {
					t.Fatalf("step %d: done %v", i, tr.Done)
				}
			}
			if got := tr.Info[InfoTruncated] == TruncatedTurnLimit; got != tc.truncated {
				t.Errorf("truncated %v, want %v (info %v)", got, tc.truncated, tr.Info)
			}
			if tc.truncated && (tr.Reward != 0 || tr.Info[InfoSuccess] != "false") {
				t.Errorf("truncated episode: reward %v success %q", tr.Reward, tr.Info[InfoSuccess])
			}
			if _, err := e.Step(ctx, "more"); !errors.Is(err, ErrEpisodeDone) {
				t.Errorf("step after done: %v", err)
			}
			if _, err := e.Reset(ctx, 1); err != nil {
				t.Fatal(err)
			}
			if tr, err := e.Step(ctx, "a"); err != nil || (tr.Done && tc.max > 1) {
				t.Errorf("after reset the count restarts: %+v %v", tr, err)
			}
			if err := e.(Closer).Close(); err != nil || inner.closed != 1 {
				t.Errorf("Close forwarded %d times: %v", inner.closed, err)
			}
		})
	}
}

// stuckEnv blocks in Step, ignoring its context, until released or closed.
type stuckEnv struct {
	echoEnv
	cooperative bool
	release     chan struct{}
	exited      chan struct{}
	once        sync.Once
}

func newStuck(cooperative bool) *stuckEnv {
	return &stuckEnv{cooperative: cooperative, release: make(chan struct{}), exited: make(chan struct{}, 1)}
}

func (e *stuckEnv) Step(ctx context.Context, action string) (Transition, error) {
	if action != "hang" {
		return e.echoEnv.Step(ctx, action)
	}
	defer func() { e.exited <- struct{}{} }()
	if e.cooperative {
		select {
		case <-ctx.Done():
			return Transition{}, ctx.Err()
		case <-e.release:
		}
	}
	<-e.release
	return Transition{}, nil
}

func (e *stuckEnv) Close() error {
	e.once.Do(func() { close(e.release) })
	return nil
}

func TestWithStepTimeout(t *testing.T) {
	ctx := context.Background()
	t.Run("fast calls pass through", func(t *testing.T) {
		e := WithStepTimeout(&echoEnv{}, time.Minute)
		if _, err := e.Reset(ctx, 0); err != nil {
			t.Fatal(err)
		}
		if tr, err := e.Step(ctx, "x"); err != nil || tr.Observation != "echo:x" {
			t.Fatalf("%+v %v", tr, err)
		}
	})
	t.Run("a hung env is abandoned and poisoned", func(t *testing.T) {
		inner := newStuck(false)
		e := WithStepTimeout(inner, 20*time.Millisecond)
		if _, err := e.Reset(ctx, 0); err != nil {
			t.Fatal(err)
		}
		if _, err := e.Step(ctx, "hang"); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("hung step: %v, want DeadlineExceeded", err)
		}
		if _, err := e.Reset(ctx, 0); !errors.Is(err, ErrPoisoned) {
			t.Errorf("reset after abandon: %v, want ErrPoisoned", err)
		}
		if err := e.(Closer).Close(); err != nil {
			t.Fatal(err)
		}
		<-inner.exited // Close unblocked the abandoned call: no goroutine is left behind
	})
	t.Run("a cooperative env is not poisoned", func(t *testing.T) {
		inner := newStuck(true)
		e := WithStepTimeout(inner, 200*time.Millisecond)
		if _, err := e.Reset(ctx, 0); err != nil {
			t.Fatal(err)
		}
		if _, err := e.Step(ctx, "hang"); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("slow step: %v, want DeadlineExceeded", err)
		}
		<-inner.exited
		if _, err := e.Reset(ctx, 0); err != nil {
			t.Errorf("reset after a timed-out cooperative step: %v", err)
		}
	})
	t.Run("caller cancellation", func(t *testing.T) {
		inner := newStuck(true)
		e := WithStepTimeout(inner, time.Minute)
		if _, err := e.Reset(ctx, 0); err != nil {
			t.Fatal(err)
		}
		cctx, cancel := context.WithCancel(ctx)
		go func() { time.Sleep(10 * time.Millisecond); cancel() }()
		if _, err := e.Step(cctx, "hang"); !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled step: %v, want Canceled", err)
		}
		<-inner.exited
	})
}

func TestWithObservationCap(t *testing.T) {
	ctx := context.Background()
	e := WithObservationCap(&echoEnv{}, 20)
	obs, _ := e.Reset(ctx, 0)
	if obs.Text != "task a" || obs.System != "Be brief." {
		t.Errorf("short observation changed: %+v", obs)
	}
	tr, _ := e.Step(ctx, strings.Repeat("é", 30))
	if len(tr.Observation) > 20 || !strings.HasSuffix(tr.Observation, "…[truncated]") || !utf8.ValidString(tr.Observation) {
		t.Errorf("capped observation %q (%d bytes)", tr.Observation, len(tr.Observation))
	}
}

func TestTruncate(t *testing.T) {
	for _, tc := range []struct {
		s    string
		max  int
		want string
	}{
		{"hello", 5, "hello"},
		{"hello world, long text", 16, "he…[truncated]"},
		{"ééééééééé", 16, "é…[truncated]"},
		{"hello", 3, "hel"},
		{"héllo", 2, "h"},
		{"", 1, ""},
	} {
		if got := truncate(tc.s, tc.max); got != tc.want {
			t.Errorf("truncate(%q, %d) = %q, want %q", tc.s, tc.max, got, tc.want)
		}
	}
}

func TestWrappersPanicOnBadArguments(t *testing.T) {
	for name, f := range map[string]func(){
		"turn limit 0":  func() { WithTurnLimit(&echoEnv{}, 0) },
		"timeout 0":     func() { WithStepTimeout(&echoEnv{}, 0) },
		"obs cap 0":     func() { WithObservationCap(&echoEnv{}, 0) },
		"negative cap":  func() { WithObservationCap(&echoEnv{}, -3) },
		"negative turn": func() { WithTurnLimit(&echoEnv{}, -1) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
}

type scriptAgent struct{ actions []string }

func (a *scriptAgent) Act(context.Context, string) (string, error) {
	if len(a.actions) == 0 {
		return "", errors.New("script exhausted")
	}
	x := a.actions[0]
	a.actions = a.actions[1:]
	return x, nil
}

func TestPlay(t *testing.T) {
	ctx := context.Background()
	ep, err := Play(ctx, &echoEnv{}, &scriptAgent{[]string{"a", "done"}}, 2, 5)
	if err != nil || !ep.Done || !ep.Success || ep.Reward != 1 || len(ep.Steps) != 2 || ep.Start.Text != "task c" {
		t.Errorf("episode %+v, %v", ep, err)
	}
	ep, err = Play(ctx, &echoEnv{}, &scriptAgent{[]string{"a", "b", "c"}}, 0, 2)
	if err != nil || ep.Done || len(ep.Steps) != 2 {
		t.Errorf("budget: %+v, %v", ep, err)
	}
	if _, err := Play(ctx, &echoEnv{}, &scriptAgent{}, 0, 2); err == nil || !strings.Contains(err.Error(), "script exhausted") {
		t.Errorf("agent error: %v", err)
	}
}
