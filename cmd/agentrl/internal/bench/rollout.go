package bench

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"runtime/metrics"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/infer"
	"github.com/agentrl/agentrl/rollout"
	"github.com/agentrl/agentrl/tokenizer"
	"github.com/agentrl/agentrl/traj"
)

// Result is one measurement of the loop on one environment at one concurrency.
type Result struct {
	Env         string
	Procs       int // GOMAXPROCS
	Concurrency int
	Episodes    int
	Steps       int // environment steps (assistant turns answered by the environment)
	Wall        time.Duration
	CPU         time.Duration // process user+system time
}

// EpisodesPerSec is episode throughput.
func (r Result) EpisodesPerSec() float64 { return float64(r.Episodes) / r.Wall.Seconds() }

// StepsPerSec is environment-step throughput.
func (r Result) StepsPerSec() float64 { return float64(r.Steps) / r.Wall.Seconds() }

// Cores is the CPU the process actually got while measured: at most Procs, less on a machine
// shared with other work.
func (r Result) Cores() float64 { return r.CPU.Seconds() / r.Wall.Seconds() }

// CPUPerStep is the process CPU time per environment step.
func (r Result) CPUPerStep() time.Duration {
	if r.Steps == 0 {
		return 0
	}
	return r.CPU / time.Duration(r.Steps)
}

// Tokenizer trains the tokenizer the benchmark uses, on the text of the environments of reg
// named in envs.
func Tokenizer(reg *env.Registry, envs []string) (*tokenizer.Tokenizer, error) {
	var corpus []string
	for _, name := range envs {
		spec, err := reg.Lookup(name)
		if err != nil {
			return nil, err
		}
		corpus = append(corpus, spec.Corpus(500)...)
	}
	return tokenizer.Train(corpus, tokenizer.DefaultTrainOptions(512))
}

func tasks(spec env.Spec, n int) []rollout.Task {
	ts := make([]rollout.Task, n)
	for i := range ts {
		ts[i] = rollout.Task{Env: spec.Name, Seed: spec.Train.Lo + int64(i)%spec.Train.Len(), GroupID: uint64(i)}
	}
	return ts
}

func expertGen(spec env.Spec, tok *tokenizer.Tokenizer) func(t rollout.Task) infer.Generator {
	return func(t rollout.Task) infer.Generator {
		rng := rand.New(rand.NewPCG(uint64(t.Seed), 7))
		return &rollout.AgentGenerator{Agent: spec.Expert(t.Seed, 0, rng), Tok: tok}
	}
}

// specEnvs makes spec's environments for RunGroups.
func specEnvs(spec env.Spec) rollout.EnvFactory {
	return func(string) (env.Env, error) { return spec.New() }
}

// benchConfig leaves room for every expert episode: none is truncated.
func benchConfig() rollout.Config {
	cfg := rollout.DefaultConfig()
	cfg.MaxContext, cfg.MaxTurns, cfg.MaxTokensPerTurn = 2048, 32, 512
	return cfg
}

// Measure runs episodes of the named environment through the agent loop (RunGroups) at the given
// concurrency with GOMAXPROCS procs. The same tasks are first played once untimed, so that
// one-time set-up (the search index, a sandbox image) and the tokenizer's word cache are not
// counted; environments are still created and closed per episode inside the timed run.
func Measure(ctx context.Context, reg *env.Registry, name string, tok *tokenizer.Tokenizer, procs, concurrency, episodes int) (Result, error) {
	spec, err := reg.Lookup(name)
	if err != nil {
		return Result{}, err
	}
	prev := runtime.GOMAXPROCS(procs)
	defer runtime.GOMAXPROCS(prev)
	cfg := benchConfig()
	ts := tasks(spec, episodes)
	if err := baseline(ctx, spec, tok, ts, cfg); err != nil {
		return Result{}, err
	}
	runtime.GC()
	return measureLoop(ctx, spec, tok, cfg, ts, procs, concurrency)
}

// measureLoop times one RunGroups call over ts.
func measureLoop(ctx context.Context, spec env.Spec, tok *tokenizer.Tokenizer, cfg rollout.Config, ts []rollout.Task, procs, concurrency int) (Result, error) {
	runner := &rollout.Runner{Tok: tok, Cfg: cfg, NewGen: expertGen(spec, tok)}
	c0, w0 := cpuTime(), time.Now()
	groups, err := runner.RunGroups(ctx, specEnvs(spec), ts, 1, concurrency)
	if err != nil {
		return Result{}, err
	}
	res := Result{Env: spec.Name, Procs: procs, Concurrency: concurrency, Wall: time.Since(w0), CPU: cpuTime() - c0}
	for _, g := range groups {
		t := g.Trajs[0]
		if t.Status != traj.StatusOK {
			return res, fmt.Errorf("bench %s: episode %s ended %s: %s", spec.Name, t.ID, t.Status, t.Error)
		}
		res.Episodes++
		res.Steps += len(t.Turns)
	}
	return res, nil
}

// Overhead is the orchestration overhead per step measured in one round: the agent loop's CPU
// time minus the baseline's (the same environment, tokenizer and generator calls in a plain
// loop over the same tasks), per step, and the part of it that is the garbage collector's.
type Overhead struct {
	PerStep time.Duration
	GC      time.Duration // the loop's GC CPU time minus the baseline's, per step
}

// MeasureOverhead measures the overhead on one core, rounds times, sorted by PerStep. Each round
// times the loop and then the baseline over the same tasks, or the other way round in odd
// rounds, so that neither always runs on the caches or the heap the other left; each starts
// from a collected heap, and the garbage collection its allocations trigger counts in its time.
// One untimed pass of each first warms one-time set-up, the tokenizer's word cache and the
// heap the loop's trajectories need. One core, because process CPU time on several also counts
// the collector's idle workers and spinning threads.
func MeasureOverhead(ctx context.Context, reg *env.Registry, name string, tok *tokenizer.Tokenizer, concurrency, episodes, rounds int) ([]Overhead, error) {
	spec, err := reg.Lookup(name)
	if err != nil {
		return nil, err
	}
	prev := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(prev)
	cfg := benchConfig()
	ts := tasks(spec, episodes)
	if err := baseline(ctx, spec, tok, ts, cfg); err != nil {
		return nil, err
	}
	if _, err := measureLoop(ctx, spec, tok, cfg, ts, 1, concurrency); err != nil {
		return nil, err
	}
	var out []Overhead
	for r := 0; r < rounds; r++ {
		var loopCPU, loopGC, baseCPU, baseGC time.Duration
		steps := 0
		for j := 0; j < 2; j++ {
			runtime.GC()
			c0, g0 := cpuTime(), gcCPU()
			if (j+r)%2 == 0 {
				res, err := measureLoop(ctx, spec, tok, cfg, ts, 1, concurrency)
				if err != nil {
					return nil, err
				}
				loopCPU, loopGC, steps = cpuTime()-c0, gcCPU()-g0, res.Steps
			} else {
				if err := baseline(ctx, spec, tok, ts, cfg); err != nil {
					return nil, err
				}
				baseCPU, baseGC = cpuTime()-c0, gcCPU()-g0
			}
		}
		n := time.Duration(max(steps, 1))
		out = append(out, Overhead{PerStep: (loopCPU - baseCPU) / n, GC: (loopGC - baseGC) / n})
	}
	slices.SortFunc(out, func(a, b Overhead) int { return cmp.Compare(a.PerStep, b.PerStep) })
	return out, nil
}

// gcCPU is the CPU time the garbage collector has used in this process, by the runtime's own
// estimate.
func gcCPU() time.Duration {
	s := []metrics.Sample{{Name: "/cpu/classes/gc/total:cpu-seconds"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64 {
		return 0
	}
	return time.Duration(s[0].Value.Float64() * 1e9)
}

// baseline makes the same environment, tokenizer and generator calls as the agent loop, one
// episode after another, with nothing around them.
func baseline(ctx context.Context, spec env.Spec, tok *tokenizer.Tokenizer, ts []rollout.Task, cfg rollout.Config) error {
	mk := expertGen(spec, tok)
	stop := []int32{tok.EndOfTurn()}
	for _, t := range ts {
		e, err := spec.New()
		if err != nil {
			return err
		}
		gen := mk(t)
		obs, err := e.Reset(ctx, t.Seed)
		if err != nil {
			return err
		}
		toks := tok.EncodePrompt(obs.System, obs.Text)
		for turn := 0; turn < cfg.MaxTurns; turn++ {
			c, err := gen.Generate(ctx, infer.Request{Prompt: toks, MaxTokens: cfg.MaxTokensPerTurn, Stop: stop})
			if err != nil {
				return err
			}
			toks = append(toks, c.Tokens...)
			tr, err := e.Step(ctx, tok.Decode(c.Tokens[:len(c.Tokens)-1]))
			if err != nil {
				return err
			}
			role := "user"
			if tr.Role == traj.RoleTool {
				role = "tool"
			}
			if tr.Done {
				// The loop keeps an episode's final observation too (the copy is its cost here).
				if tr.Observation != "" {
					_ = append(toks, tok.EncodeFinal(role, tr.Observation)...)
				}
				break
			}
			toks = append(toks, tok.EncodeObservation(role, tr.Observation)...)
		}
		if cl, ok := e.(env.Closer); ok {
			cl.Close()
		}
	}
	return nil
}

// RolloutOptions says what Rollout measures; `agentrl bench rollout` documents each field.
type RolloutOptions struct {
	Registry    *env.Registry // where the environments are looked up
	Envs        string        // comma-separated environments
	Concurrency string        // comma-separated concurrency levels
	Episodes    int           // episodes per measurement (at least the concurrency)
	Scaling     string        // comma-separated environments measured at GOMAXPROCS 1 and 2
	Rounds      int           // repetitions of the overhead and scaling measurements
	ResidentMiB int           // pointer-free memory held while measuring, as a trainer holds its weights
	MemEpisodes int           // episodes held in flight for the memory measurement
	MemTokens   int           // tokens per episode in the memory measurement
}

// Rollout measures the agent loop with a zero-latency scripted generator and prints to w one
// table of throughput and overhead, the scaling ratios and the memory figure.
func Rollout(ctx context.Context, w io.Writer, c RolloutOptions) error {
	envs := splitList(c.Envs)
	var levels []int
	for _, s := range splitList(c.Concurrency) {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return fmt.Errorf("bench rollout: bad concurrency %q", s)
		}
		levels = append(levels, n)
	}
	if c.Rounds < 1 {
		return fmt.Errorf("bench rollout: rounds must be at least 1, got %d", c.Rounds)
	}
	if c.ResidentMiB < 0 {
		return fmt.Errorf("bench rollout: resident-mib must not be negative, got %d", c.ResidentMiB)
	}
	// Never written, so it costs address space, not memory; it only raises the collector's
	// heap goal, as a trainer's weights do.
	resident := make([]byte, c.ResidentMiB<<20)
	defer runtime.KeepAlive(resident)
	tok, err := Tokenizer(c.Registry, envs)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	// Throughput is measured on both cores ("cores used" says how much of them the process got
	// on a shared machine); the overhead per step on one core, where process CPU time is not
	// inflated by the garbage collector's workers running beside the loop.
	fmt.Fprintf(tw, "env\tconcurrency\tepisodes\tepisodes/s (2 cores)\tsteps/s (2 cores)\tcores used\toverhead/step (1 core, median of %d)\tof which GC\trange\t\n", c.Rounds)
	for _, name := range envs {
		for _, n := range levels {
			episodes := max(c.Episodes, n)
			r, err := Measure(ctx, c.Registry, name, tok, 2, n, episodes)
			if err != nil {
				return err
			}
			over, err := MeasureOverhead(ctx, c.Registry, name, tok, n, episodes, c.Rounds)
			if err != nil {
				return err
			}
			med := over[len(over)/2]
			fmt.Fprintf(tw, "%s\t%d\t%d\t%.0f\t%.0f\t%.2f\t%s\t%s\t%s – %s\t\n", r.Env, r.Concurrency, r.Episodes, r.EpisodesPerSec(), r.StepsPerSec(), r.Cores(),
				med.PerStep, med.GC, over[0].PerStep, over[len(over)-1].PerStep)
		}
	}
	tw.Flush()
	// Scaling alternates one core and two, so that a change in the machine's load hits both. On
	// a shared machine the wall-clock ratio is bounded by the cores the process got; CPU time
	// per step says whether the work itself grows with the second core.
	for _, name := range splitList(c.Scaling) {
		var ratios []float64
		var one, two Result
		for i := 0; i < c.Rounds; i++ {
			if one, err = Measure(ctx, c.Registry, name, tok, 1, 64, c.Episodes); err != nil {
				return err
			}
			if two, err = Measure(ctx, c.Registry, name, tok, 2, 64, c.Episodes); err != nil {
				return err
			}
			ratios = append(ratios, two.StepsPerSec()/one.StepsPerSec())
		}
		slices.Sort(ratios)
		fmt.Fprintf(w, "scaling %s (concurrency 64, %d rounds): 2 cores / 1 core = %.2fx median, %.2fx – %.2fx; last round %.0f steps/s on 1 core, %.0f on 2 using %.2f cores, CPU/step %s on 1, %s on 2\n",
			name, c.Rounds, ratios[len(ratios)/2], ratios[0], ratios[len(ratios)-1], one.StepsPerSec(), two.StepsPerSec(), two.Cores(), one.CPUPerStep(), two.CPUPerStep())
	}
	if c.MemEpisodes > 0 {
		m, err := Memory(ctx, tok, c.MemEpisodes, c.MemTokens)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "memory: %d episodes of %d tokens in flight: %.1f MiB (heap %.1f MiB, stacks %.1f MiB), %.1f KiB per episode\n",
			m.Episodes, m.TokensEach, float64(m.TotalInFlight)/(1<<20), float64(m.HeapBytes)/(1<<20), float64(m.StackBytes)/(1<<20), m.PerEpisode/1024)
	}
	return nil
}
