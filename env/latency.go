package env

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// LatencyConfig is a simulated per-step latency: before each Step (and, with Reset set, each
// Reset) the WithLatency wrapper sleeps for a duration drawn from a heavy-tailed distribution,
// as a slow tool, a remote sandbox or a long-running environment would take. It is a benchmark
// workload: runs that use it say that their latency is simulated.
//
// In a run's YAML it is the latency block of a phase's environment entry:
//
//	envs:
//	  - name: calc
//	    weight: 1
//	    latency: {dist: lognormal, median: 50ms, p99_over_p50: 20}
//
// Both distributions are given by their median and the ratio of their 99th percentile to it, so
// a sweep of the tail changes one number; p99_over_p50 1 is a constant latency (no tail).
type LatencyConfig struct {
	// Dist is "lognormal" (σ = ln(p99_over_p50)/z₀.₉₉) or "pareto" (α = ln 50/ln(p99_over_p50),
	// scale = median/2^(1/α)).
	Dist string `yaml:"dist"`
	// Median is the distribution's median.
	Median time.Duration `yaml:"median"`
	// P99OverP50 is the 99th percentile over the median, at least 1.
	P99OverP50 float64 `yaml:"p99_over_p50"`
	// Max, when positive, caps each draw. A Pareto tail with p99_over_p50 ≥ 50 (α ≤ 1) has no
	// finite mean and needs it.
	Max time.Duration `yaml:"max,omitempty"`
	// Reset sleeps before Reset as well as before each Step.
	Reset bool `yaml:"reset,omitempty"`
}

// Limits of a LatencyConfig.
const (
	MaxLatency      = time.Hour // median and max
	MaxLatencyRatio = 1000      // p99_over_p50
)

// z99 is the standard normal's 99th percentile.
const z99 = 2.3263478740408408

// Validate reports the first problem, naming the setting by its YAML key under latency.
func (c LatencyConfig) Validate() error {
	switch c.Dist {
	case "lognormal", "pareto":
	default:
		return fmt.Errorf(`latency.dist must be "lognormal" or "pareto", got %q`, c.Dist)
	}
	if c.Median <= 0 || c.Median > MaxLatency {
		return fmt.Errorf("latency.median must be in (0, %v], got %v", MaxLatency, c.Median)
	}
	if !(c.P99OverP50 >= 1 && c.P99OverP50 <= MaxLatencyRatio) {
		return fmt.Errorf("latency.p99_over_p50 must be in [1, %d], got %v", MaxLatencyRatio, c.P99OverP50)
	}
	if c.Max < 0 || c.Max > MaxLatency {
		return fmt.Errorf("latency.max must be in [0, %v] (0: no cap), got %v", MaxLatency, c.Max)
	}
	if c.Max > 0 && c.Max < c.Median {
		return fmt.Errorf("latency.max %v is below latency.median %v", c.Max, c.Median)
	}
	if c.Dist == "pareto" && c.P99OverP50 >= 50 && c.Max == 0 {
		return fmt.Errorf("latency: a pareto tail with p99_over_p50 %v (alpha %.2f <= 1) has no finite mean: set latency.max", c.P99OverP50, c.alpha())
	}
	return nil
}

// String describes the distribution, saying that it is simulated.
func (c LatencyConfig) String() string {
	s := fmt.Sprintf("simulated %s latency, median %v, p99/p50 %g", c.Dist, c.Median, c.P99OverP50)
	if c.Max > 0 {
		s += fmt.Sprintf(", max %v", c.Max)
	}
	if c.Reset {
		s += ", on reset too"
	}
	return s
}

// sigma is the log-normal's σ.
func (c LatencyConfig) sigma() float64 { return math.Log(c.P99OverP50) / z99 }

// alpha is the Pareto's shape (+Inf when p99_over_p50 is 1: a constant).
func (c LatencyConfig) alpha() float64 { return math.Log(50) / math.Log(c.P99OverP50) }

// Quantile is the latency at probability q in (0, 1), before the cap.
func (c LatencyConfig) Quantile(q float64) time.Duration {
	m := float64(c.Median)
	var x float64
	if c.P99OverP50 == 1 {
		x = m
	} else if c.Dist == "pareto" {
		a := c.alpha()
		x = m / math.Pow(2, 1/a) * math.Pow(1-q, -1/a)
	} else {
		// Φ⁻¹(q) = −√2·erfc⁻¹(2q)
		x = m * math.Exp(c.sigma()*-math.Sqrt2*math.Erfcinv(2*q))
	}
	return time.Duration(min(x, float64(math.MaxInt64/2)))
}

// Draw is one latency from rng, capped by Max.
func (c LatencyConfig) Draw(rng *rand.Rand) time.Duration {
	var d time.Duration
	switch {
	case c.P99OverP50 == 1:
		d = c.Median
	case c.Dist == "pareto":
		d = c.Quantile(1 - rng.Float64()) // 1 − U is in (0, 1]: never the infinite quantile
	default:
		d = time.Duration(min(float64(c.Median)*math.Exp(c.sigma()*rng.NormFloat64()), float64(math.MaxInt64/2)))
	}
	if c.Max > 0 && d > c.Max {
		d = c.Max
	}
	return d
}

// latencyEnv is the WithLatency wrapper.
type latencyEnv struct {
	inner Env
	c     LatencyConfig
	seed  int64
	turn  uint64
}

// WithLatency sleeps before every Step of inner (and before Reset when c.Reset) for a duration
// drawn from c's distribution. The draw of a call depends only on the episode's task seed and
// the turn (Reset is turn 0, the n-th Step turn n), so an episode takes the same simulated time
// whenever and wherever it runs. A cancelled ctx cuts the sleep short and the call returns the
// context's error without reaching inner. It panics on an invalid c, a programming error (a
// run's configuration is validated first).
func WithLatency(inner Env, c LatencyConfig) Env {
	if err := c.Validate(); err != nil {
		panic("env: WithLatency: " + err.Error())
	}
	return &latencyEnv{inner: inner, c: c}
}

func (e *latencyEnv) draw() time.Duration {
	rng := rand.New(rand.NewPCG(uint64(e.seed), e.turn^0x1a7e_4c7e_d5ee_9b11))
	return e.c.Draw(rng)
}

func (e *latencyEnv) Reset(ctx context.Context, seed int64) (Observation, error) {
	e.seed, e.turn = seed, 0
	if e.c.Reset {
		if err := sleepCtx(ctx, e.draw()); err != nil {
			return Observation{}, err
		}
	}
	return e.inner.Reset(ctx, seed)
}

func (e *latencyEnv) Step(ctx context.Context, action string) (Transition, error) {
	e.turn++
	if err := sleepCtx(ctx, e.draw()); err != nil {
		return Transition{}, err
	}
	return e.inner.Step(ctx, action)
}

// Close closes inner.
func (e *latencyEnv) Close() error { return closeInner(e.inner) }

// sleepCtx waits d or until ctx is done, whichever is first.
func sleepCtx(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("env: simulated latency cut short: %w", ctx.Err())
	}
}

// LatencyOf returns the simulated latency of e's WithLatency wrapper, looked for under this
// package's pass-through wrappers (as ToolsOf looks for tools), and false when it has none.
func LatencyOf(e Env) (LatencyConfig, bool) {
	for {
		if w, ok := e.(*latencyEnv); ok {
			return w.c, true
		}
		p := innerOf(e)
		if p == nil {
			return LatencyConfig{}, false
		}
		e = *p
	}
}

// toolLatencyEnv is the WithToolLatency wrapper.
type toolLatencyEnv struct {
	inner Env
	c     LatencyConfig
	seed  uint64
	n     uint64 // steps that called tools so far
}

// WithToolLatency sleeps, after each Step of inner that ran tool calls (its transition lists
// them), for a duration drawn from c: the latency of a tool service that the caller waits for
// and that holds no lock while it waits. A step without a tool call (an answer) does not wait,
// nor does Reset. The n-th draw depends only on seed and n (ToolLatencies lists them), so an
// episode takes the same simulated time whenever and wherever it runs. A cancelled ctx cuts the
// sleep short and Step returns the context's error. It panics on an invalid c, a programming
// error (a run's configuration is validated first).
func WithToolLatency(inner Env, c LatencyConfig, seed uint64) Env {
	if err := c.Validate(); err != nil {
		panic("env: WithToolLatency: " + err.Error())
	}
	return &toolLatencyEnv{inner: inner, c: c, seed: seed}
}

func toolDraw(c LatencyConfig, seed, n uint64) time.Duration {
	return c.Draw(rand.New(rand.NewPCG(seed, n^0x70_01_1a7e_4c7e_d5ee)))
}

func (e *toolLatencyEnv) Reset(ctx context.Context, seed int64) (Observation, error) {
	e.n = 0
	return e.inner.Reset(ctx, seed)
}

func (e *toolLatencyEnv) Step(ctx context.Context, action string) (Transition, error) {
	tr, err := e.inner.Step(ctx, action)
	if err != nil || len(tr.ToolCalls) == 0 {
		return tr, err
	}
	e.n++
	if err := sleepCtx(ctx, toolDraw(e.c, e.seed, e.n)); err != nil {
		return Transition{}, err
	}
	return tr, nil
}

// Close closes inner.
func (e *toolLatencyEnv) Close() error { return closeInner(e.inner) }

// ToolLatencies lists the latencies WithToolLatency sleeps after the first n steps that call
// tools of an episode wrapped with seed.
func ToolLatencies(c LatencyConfig, seed uint64, n int) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = toolDraw(c, seed, uint64(i+1))
	}
	return out
}

// LatencyOfEpisode lists the latencies WithLatency sleeps in the episode of seed for its first
// steps steps, Reset's first when c.Reset.
func LatencyOfEpisode(c LatencyConfig, seed int64, steps int) []time.Duration {
	e := &latencyEnv{c: c, seed: seed}
	var out []time.Duration
	if c.Reset {
		out = append(out, e.draw())
	}
	for range steps {
		e.turn++
		out = append(out, e.draw())
	}
	return out
}
