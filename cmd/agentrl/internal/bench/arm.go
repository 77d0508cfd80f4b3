package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"

	"github.com/agentrl/agentrl/checkpoint"
	"github.com/agentrl/agentrl/config"
	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/eval"
	"github.com/agentrl/agentrl/pipeline"
)

// rlArm says how an arm of a learning bench trains and is evaluated: the preset whose RL phase
// it runs, checkpoints every `every` steps up to `steps`, each evaluated afterwards on `tasks`
// held-out tasks of the preset's environment with `samples` samples each, under the preset's
// rollout settings with sets applied (a bench's overrides of every arm).
type rlArm struct {
	envs                         *env.Registry
	preset                       string
	sets                         []string
	steps, every, tasks, samples int
	terminal                     bool
	// at, when set, picks the steps whose checkpoints are evaluated from the episodes trained up
	// to each step (instead of every `every` steps up to `steps`).
	at func(trained map[int]float64) []int
	// stopAt, when above 0, stops the RL phase after the first step by which it has trained as
	// many episodes (≈, as readArmMetrics counts them).
	stopAt float64
}

// trainRLArm trains the preset's RL phase alone with sets (which name the supervised checkpoint
// it starts from), reads its metrics, and evaluates on held-out tasks the checkpoints it took
// every a.every steps up to a.steps.
func trainRLArm(ctx context.Context, out io.Writer, a rlArm, sets []string, seed uint64) (*asyncArm, error) {
	cfg, err := config.Load(a.envs, a.preset, "", sets)
	if err != nil {
		return nil, err
	}
	cfg.Phases = cfg.Phases[1:] // RL only, from the supervised checkpoint
	opts := pipeline.Options{Out: out, Terminal: a.terminal, Envs: a.envs}
	if a.stopAt > 0 {
		trained, g := 0.0, float64(cfg.Phases[0].RL.GroupSize)
		opts.StopRL = func(_ string, _ int, m map[string]any) bool {
			trained += metricNum(m, "signal/groups_kept")*g - metricNum(m, "async/dropped_stale")
			return trained >= a.stopAt
		}
	}
	run, err := pipeline.NewRun(cfg, opts)
	if err != nil {
		return nil, err
	}
	if _, err := run.Train(ctx); err != nil && !errors.Is(err, pipeline.ErrStopped) {
		return nil, err
	}
	r, byStep, err := readArmMetrics(run.Dir, cfg.Phases[0].RL.GroupSize)
	if err != nil {
		return nil, err
	}
	steps := []int{}
	if a.at != nil {
		steps = a.at(r.trainedBy)
	} else {
		for s := a.every; s <= a.steps; s += a.every {
			steps = append(steps, s)
		}
	}
	for _, s := range steps {
		p, err := evalCheckpoint(ctx, filepath.Join(run.Dir, "checkpoints", fmt.Sprintf("rl-p0.s%06d", s)), seed, a)
		if err != nil {
			return nil, err
		}
		p.step, p.wall, p.trained = s, byStep[s][0], byStep[s][1]
		r.points = append(r.points, p)
	}
	return r, nil
}

// evalCheckpoint evaluates the checkpoint in dir on held-out tasks of the environment the
// preset's RL phase trains on, with the rollout limits and engine the arm trains with (no
// simulated latency: evaluation measures the policy).
func evalCheckpoint(ctx context.Context, dir string, seed uint64, a rlArm) (evalPoint, error) {
	ck, err := checkpoint.Load(dir)
	if err != nil {
		return evalPoint{}, err
	}
	cfg, err := config.Load(a.envs, a.preset, "", a.sets)
	if err != nil {
		return evalPoint{}, err
	}
	name := cfg.Phases[len(cfg.Phases)-1].Envs[0].Name
	r, err := eval.Run(ctx, ck.Model, ck.Tokenizer, 0, eval.Options{Env: name, Tasks: a.tasks, K: a.samples, Seed: seed,
		Rollout: cfg.Rollout.Config, Slots: cfg.Rollout.EngineSlots, Envs: a.envs})
	if err != nil {
		return evalPoint{}, err
	}
	p := evalPoint{pass1: *r.Pass1Sampled, se: standardError(r.Pass1PerTask), greedy: r.Pass1Greedy, tokens: r.MeanResponseTokens, critical: r.MeanTurns}
	if r.Delegation != nil {
		p.critical = r.Delegation.CriticalCalls
	}
	return p, nil
}

// sftRun is a supervised checkpoint to train: the preset's supervised phase alone, as run name
// under runsDir with seed; steps > 0 replaces the phase's steps (its sequence-length warmup
// scales with them, its learning-rate warmup is capped by them); sets apply last.
type sftRun struct {
	envs          *env.Registry
	runsDir, name string
	preset        string
	steps         int
	seed          uint64
	sets          []string
	terminal      bool
}

// supervisedCheckpoint trains s and returns its last checkpoint.
func supervisedCheckpoint(ctx context.Context, out io.Writer, s sftRun) (string, error) {
	sets := []string{"runs_dir=" + s.runsDir, "name=" + s.name, fmt.Sprintf("seed=%d", s.seed), "eval.tasks=8", "eval.samples=1"}
	if s.steps > 0 {
		sets = append(sets, fmt.Sprintf("phases.sft.steps=%d", s.steps))
		if p, err := config.Preset(s.preset); err == nil {
			sft := p.Phases[0]
			if c := sft.SFT.Curriculum; c > 0 {
				sets = append(sets, fmt.Sprintf("phases.sft.sft.curriculum=%d", c*s.steps/sft.Steps))
			}
			sets = append(sets, fmt.Sprintf("phases.sft.optim.warmup=%d", min(sft.Optim.Warmup, s.steps)))
		}
	}
	cfg, err := config.Load(s.envs, s.preset, "", append(sets, s.sets...))
	if err != nil {
		return "", err
	}
	cfg.Phases = cfg.Phases[:1]
	run, err := pipeline.NewRun(cfg, pipeline.Options{Out: out, Terminal: s.terminal, Envs: s.envs})
	if err != nil {
		return "", err
	}
	sum, err := run.Train(ctx)
	if err != nil {
		return "", err
	}
	return filepath.Join(sum.Dir, "checkpoints", fmt.Sprintf("sft-p0.s%06d", cfg.Phases[0].Steps)), nil
}

// metricNum is a metrics line's number at key, as the line holds it before it is written
// (an int or a float64; 0 when absent).
func metricNum(m map[string]any, key string) float64 {
	switch v := m[key].(type) {
	case int:
		return float64(v)
	case float64:
		return v
	}
	return 0
}
