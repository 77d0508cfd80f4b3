package env_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/env/calc"
	"github.com/agentrl/agentrl/env/envtest"
	"github.com/agentrl/agentrl/tool"
	"github.com/agentrl/agentrl/traj"
)

// TestLatencyQuantiles draws many latencies and compares their empirical median and 99th
// percentile with the configured ones, for both distributions and several tails.
func TestLatencyQuantiles(t *testing.T) {
	for _, c := range []env.LatencyConfig{
		{Dist: "lognormal", Median: 50 * time.Millisecond, P99OverP50: 1},
		{Dist: "lognormal", Median: 50 * time.Millisecond, P99OverP50: 5},
		{Dist: "lognormal", Median: 20 * time.Millisecond, P99OverP50: 50},
		{Dist: "pareto", Median: 50 * time.Millisecond, P99OverP50: 5},
		{Dist: "pareto", Median: 10 * time.Millisecond, P99OverP50: 20},
		{Dist: "pareto", Median: 10 * time.Millisecond, P99OverP50: 50, Max: time.Minute},
	} {
		if err := c.Validate(); err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(1, 2))
		const n = 200_000
		d := make([]float64, n)
		for i := range d {
			d[i] = float64(c.Draw(rng))
		}
		slices.Sort(d)
		p50, p99 := d[n/2], d[n*99/100]
		if r := p50 / float64(c.Median); r < 0.98 || r > 1.02 {
			t.Errorf("%v: empirical median %v, want %v ±2%%", c, time.Duration(p50), c.Median)
		}
		if r := (p99 / p50) / c.P99OverP50; r < 0.95 || r > 1.05 {
			t.Errorf("%v: empirical p99/p50 %.2f, want %g ±5%%", c, p99/p50, c.P99OverP50)
		}
		if q := c.Quantile(0.99); float64(q)/float64(c.Median) < c.P99OverP50*0.999 || float64(q)/float64(c.Median) > c.P99OverP50*1.001 {
			t.Errorf("%v: Quantile(0.99) = %v", c, q)
		}
	}
}

func TestLatencyValidate(t *testing.T) {
	ok := env.LatencyConfig{Dist: "lognormal", Median: time.Millisecond, P99OverP50: 10}
	for _, c := range []env.LatencyConfig{
		{Dist: "normal", Median: time.Millisecond, P99OverP50: 2},
		{Dist: "lognormal", Median: 0, P99OverP50: 2},
		{Dist: "lognormal", Median: time.Millisecond, P99OverP50: 0.5},
		{Dist: "pareto", Median: time.Millisecond, P99OverP50: 50},
		{Dist: "pareto", Median: time.Second, P99OverP50: 2, Max: time.Millisecond},
	} {
		if c.Validate() == nil {
			t.Errorf("%+v: no error", c)
		}
	}
	if err := ok.Validate(); err != nil {
		t.Error(err)
	}
	capped := env.LatencyConfig{Dist: "pareto", Median: time.Millisecond, P99OverP50: 50, Max: 2 * time.Millisecond}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 10_000 {
		if d := capped.Draw(rng); d > capped.Max {
			t.Fatalf("draw %v over max %v", d, capped.Max)
		}
	}
}

// countEnv counts the calls that reach it.
type countEnv struct{ resets, steps int }

func (e *countEnv) Reset(context.Context, int64) (env.Observation, error) {
	e.resets++
	return env.Observation{Text: "t"}, nil
}
func (e *countEnv) Step(context.Context, string) (env.Transition, error) {
	e.steps++
	return env.Transition{Observation: "o"}, nil
}

// TestLatencyCancel checks that a cancelled context cuts the sleep short and keeps the call from
// reaching the environment.
func TestLatencyCancel(t *testing.T) {
	inner := &countEnv{}
	e := env.WithLatency(inner, env.LatencyConfig{Dist: "lognormal", Median: time.Hour, P99OverP50: 1})
	ctx := context.Background()
	if _, err := e.Reset(ctx, 1); err != nil { // Reset does not sleep unless asked
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	_, err := e.Step(ctx, "x")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want the context's deadline", err)
	}
	if el := time.Since(t0); el > 5*time.Second {
		t.Fatalf("cancelled step took %v", el)
	}
	if inner.steps != 0 {
		t.Fatal("a cancelled step reached the environment")
	}
}

// TestLatencyDeterministic checks that an episode's sleeps depend on its seed and turn only,
// and that they are taken: a Reset with reset: true and each Step sleep at least the draw.
func TestLatencyDeterministic(t *testing.T) {
	c := env.LatencyConfig{Dist: "pareto", Median: 2 * time.Millisecond, P99OverP50: 10, Reset: true, Max: 30 * time.Millisecond}
	e := env.WithLatency(&countEnv{}, c)
	ctx := context.Background()
	t0 := time.Now()
	if _, err := e.Reset(ctx, 7); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := e.Step(ctx, "a"); err != nil {
			t.Fatal(err)
		}
	}
	el := time.Since(t0)
	// Recompute the draws as the wrapper makes them.
	want := env.LatencyOfEpisode(c, 7, 3)
	var total time.Duration
	for _, d := range want {
		total += d
	}
	if el < total {
		t.Fatalf("episode took %v, less than its draws %v (%v)", el, total, want)
	}
	if again := env.LatencyOfEpisode(c, 7, 3); !slices.Equal(again, want) {
		t.Fatal("draws differ between calls")
	}
	if other := env.LatencyOfEpisode(c, 8, 3); slices.Equal(other, want) {
		t.Fatal("another seed draws the same latencies")
	}
}

// TestLatencySuite runs the shared suite over calc wrapped with a small simulated latency.
func TestLatencySuite(t *testing.T) {
	spec := calc.Spec()
	inner := spec.New
	spec.Name = "calc-latency"
	spec.Levels, spec.AtLevel = nil, nil // the levels would not be wrapped
	spec.New = func() (env.Env, error) {
		e, err := inner()
		if err != nil {
			return nil, err
		}
		return env.WithLatency(e, env.LatencyConfig{Dist: "lognormal", Median: 20 * time.Microsecond, P99OverP50: 20, Reset: true}), nil
	}
	envtest.Run(t, spec)
}

// toolStepEnv answers "call" with a transition that lists a tool call and anything else with an
// answer.
type toolStepEnv struct{ countEnv }

func (e *toolStepEnv) Step(ctx context.Context, a string) (env.Transition, error) {
	e.steps++
	if a == "call" {
		return env.Transition{Observation: "r", ToolCalls: []traj.ToolCall{{Name: "lookup"}}}, nil
	}
	return env.Transition{Done: true}, nil
}

// TestToolLatency checks WithToolLatency: it waits its n-th draw after the n-th step that ran
// tool calls, never after an answer or a Reset; the draws depend on the seed alone; a cancelled
// context cuts the wait short.
func TestToolLatency(t *testing.T) {
	c := env.LatencyConfig{Dist: "lognormal", Median: 20 * time.Millisecond, P99OverP50: 3, Max: 60 * time.Millisecond}
	want := env.ToolLatencies(c, 11, 2)
	if again := env.ToolLatencies(c, 11, 2); !slices.Equal(again, want) || slices.Equal(env.ToolLatencies(c, 12, 2), want) || want[0] == want[1] {
		t.Fatalf("draws %v: not fixed by the seed alone", want)
	}
	ctx := context.Background()
	e := env.WithToolLatency(&toolStepEnv{}, c, 11)
	step := func(a string) time.Duration {
		t0 := time.Now()
		if _, err := e.Step(ctx, a); err != nil {
			t.Fatal(err)
		}
		return time.Since(t0)
	}
	t0 := time.Now()
	if _, err := e.Reset(ctx, 1); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if el := step("call"); el < want[i] {
			t.Fatalf("tool step %d took %v, less than its draw %v", i+1, el, want[i])
		}
	}
	if el := step("answer"); el > 15*time.Millisecond {
		t.Fatalf("an answer waited %v", el)
	}
	if el := time.Since(t0); el > 5*time.Second {
		t.Fatalf("the episode took %v", el)
	}
	// A cancelled context: the call has run (it is the wait after it that is cut), the step fails.
	long := env.WithToolLatency(&toolStepEnv{}, env.LatencyConfig{Dist: "lognormal", Median: time.Hour, P99OverP50: 1}, 1)
	cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := long.Step(cctx, "call"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want the context's deadline", err)
	}
}

// TestLatencyWrapperIsPassThrough: the tools and the latency itself are
// found beneath the latency wrappers (rollout's delegation reads all three).
func TestLatencyWrapperIsPassThrough(t *testing.T) {
	calc, err := tool.NewCalculator(tool.CalcLimits{})
	if err != nil {
		t.Fatal(err)
	}
	c := env.LatencyConfig{Dist: "pareto", Median: time.Millisecond, P99OverP50: 4}
	e := env.WithLatency(env.WithTools(&countEnv{}, []tool.Tool{calc}, env.ToolLimits{}), c)
	if got, ok := env.LatencyOf(e); !ok || got != c {
		t.Fatalf("LatencyOf = %+v, %v", got, ok)
	}
	if ts := env.ToolsOf(e); len(ts) != 1 || ts[0].Name() != "calculator" {
		t.Fatalf("ToolsOf = %v", ts)
	}
	if ts := env.ToolsOf(env.WithToolLatency(e, c, 1)); len(ts) != 1 {
		t.Fatalf("ToolsOf under WithToolLatency = %v", ts)
	}
	if _, ok := env.LatencyOf(env.WithTools(&countEnv{}, []tool.Tool{calc}, env.ToolLimits{})); ok {
		t.Fatal("LatencyOf found a latency where there is none")
	}
}
