// Package benchrollout measures the agent loop's own cost: episodes and environment steps per
// second with a zero-latency scripted generator (each environment's expert playing through the
// real tokenizer), the orchestration overhead per step (time spent neither in the environment,
// the tokenizer nor the generator), scaling from one core to two, and memory per in-flight
// episode. `agentrl bench rollout` prints its results.
package benchrollout

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"syscall"
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
	// BaselineCPU is the CPU time of the same environment, tokenizer and generator calls made
	// directly in a plain loop, without the agent loop around them.
	BaselineCPU time.Duration
}

// EpisodesPerSec is episode throughput.
func (r Result) EpisodesPerSec() float64 { return float64(r.Episodes) / r.Wall.Seconds() }

// StepsPerSec is environment-step throughput.
func (r Result) StepsPerSec() float64 { return float64(r.Steps) / r.Wall.Seconds() }

// OverheadPerStep is the orchestration CPU cost per step: the loop's CPU time minus the CPU time
// of the same work done directly, divided by steps.
func (r Result) OverheadPerStep() time.Duration {
	if r.Steps == 0 {
		return 0
	}
	return (r.CPU - r.BaselineCPU) / time.Duration(r.Steps)
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Tokenizer trains the tokenizer the benchmark uses, on the environments' own text.
func Tokenizer(envs []string) (*tokenizer.Tokenizer, error) {
	var corpus []string
	for _, name := range envs {
		spec, err := env.Lookup(name)
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

// Measure runs episodes of the named environment at the given concurrency with GOMAXPROCS procs.
func Measure(ctx context.Context, name string, tok *tokenizer.Tokenizer, procs, concurrency, episodes int) (Result, error) {
	spec, err := env.Lookup(name)
	if err != nil {
		return Result{}, err
	}
	prev := runtime.GOMAXPROCS(procs)
	defer runtime.GOMAXPROCS(prev)
	cfg := rollout.DefaultConfig()
	cfg.MaxContext, cfg.MaxTurns, cfg.MaxTokensPerTurn = 2048, 32, 512
	runner := &rollout.Runner{Tok: tok, Cfg: cfg, NewGen: expertGen(spec, tok)}
	ts := tasks(spec, episodes)
	// Environments are made before the clock starts so that set-up (a sandbox, an index) is not
	// counted as per-step cost; the loop still creates and closes one per episode.
	runtime.GC()
	c0, w0 := cpuTime(), time.Now()
	groups, err := runner.RunGroups(ctx, nil, ts, 1, concurrency)
	if err != nil {
		return Result{}, err
	}
	res := Result{Env: name, Procs: procs, Concurrency: concurrency, Wall: time.Since(w0), CPU: cpuTime() - c0}
	for _, g := range groups {
		t := g.Trajs[0]
		if t.Status != traj.StatusOK {
			return res, fmt.Errorf("bench %s: episode %s ended %s: %s", name, t.ID, t.Status, t.Error)
		}
		res.Episodes++
		res.Steps += len(t.Turns)
	}
	runtime.GC()
	b0 := cpuTime()
	if err := baseline(ctx, spec, tok, ts, cfg); err != nil {
		return res, err
	}
	res.BaselineCPU = cpuTime() - b0
	return res, nil
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
			if tr.Done {
				break
			}
			role := "user"
			if tr.Role == traj.RoleTool {
				role = "tool"
			}
			toks = append(toks, tok.EncodeObservation(role, tr.Observation)...)
		}
		if cl, ok := e.(env.Closer); ok {
			cl.Close()
		}
	}
	return nil
}
