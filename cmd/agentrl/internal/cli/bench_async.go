package cli

import (
	"time"

	"github.com/agentrl/agentrl/cmd/agentrl/internal/bench"
)

// BenchAsyncCmd compares synchronous RL with the asynchronous controller on calc with a
// simulated heavy-tailed step latency: wall time to a held-out pass@1 target, pass@1 at equal
// trained episodes, throughput, idle time, staleness and drops.
type BenchAsyncCmd struct {
	RunsDir  string        `name:"runs-dir" default:"runs" help:"Directory for the supervised checkpoint and the arms' runs."`
	Init     string        `help:"Supervised checkpoint to start every arm's RL from (default: train one first, with --sft-steps)."`
	SFTSteps int           `name:"sft-steps" default:"3000" help:"Supervised steps of the checkpoint trained when --init is not given."`
	Arms     string        `default:"sync,1,2,4,2-bounded" help:"Comma-separated arms: sync; overlap (one-step overlap: each step sampled while the step before trains); N (continuous admission, max_staleness η = N, finish order); N-option… with options nopartial (weights switching only between completions), bounded or admission (rl.async.order), keep (rl.async.stale: keep), mask, nocap or none (the importance correction: IS mask [0.5, 2], uncapped, none; default capped at 2), e.g. 2-bounded, 4-keep, 2-none."`
	Tails    string        `default:"1,5,20,50" help:"Comma-separated p99/p50 ratios of the simulated step latency (1: no tail)."`
	Dist     string        `default:"lognormal" enum:"lognormal,pareto" help:"Latency distribution (lognormal, pareto)."`
	Median   time.Duration `default:"50ms" help:"Median simulated latency of an environment step."`
	Max      time.Duration `default:"0s" help:"Cap on one step's latency (0: none; a pareto tail of p99/p50 >= 50 needs one)."`
	Seeds    string        `default:"1,2,3,4,5" help:"Comma-separated RL seeds (paired differences to sync need two or more; five for the intervals to mean much)."`
	Steps    int           `default:"60" help:"RL steps of sync (the preset trains 100); asynchronous arms run on until they have trained as many episodes as sync at the same tail and seed."`
	Extra    float64       `default:"0.5" help:"Share of --steps an asynchronous arm may run beyond them to reach sync's trained episodes."`
	Every    int           `default:"10" help:"RL steps between the checkpoints evaluated on held-out tasks."`
	Tasks    int           `default:"2000" help:"Held-out tasks per evaluation (the preset evaluates 200); the bench prints the evaluations' standard error, which should be at most 1 point."`
	Samples  int           `default:"4" help:"Samples per task for the sampled pass@1."`
	Target   float64       `default:"0.6" help:"Held-out sampled pass@1 whose wall time is the primary figure."`
	Set      []string      `help:"Override a setting of every arm." placeholder:"KEY=VALUE"`
	Quiet    bool          `help:"Print only progress lines per arm and the tables."`
}

// Run trains every arm at every tail and seed and prints the comparison.
func (c *BenchAsyncCmd) Run(g *Globals) error {
	return bench.Async(g.Ctx, g.Stdout, bench.AsyncOptions{
		Envs: g.Envs, RunsDir: c.RunsDir, Init: c.Init, SFTSteps: c.SFTSteps, Arms: c.Arms, Tails: c.Tails, Dist: c.Dist,
		Median: c.Median, Max: c.Max, Seeds: c.Seeds, Steps: c.Steps, Extra: c.Extra, Every: c.Every, Tasks: c.Tasks, Samples: c.Samples,
		Target: c.Target, Set: c.Set, Quiet: c.Quiet, Terminal: isTerminal(g.Stdout),
	})
}
