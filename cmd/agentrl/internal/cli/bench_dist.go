package cli

import (
	"errors"
	"os"
	"time"

	"github.com/agentrl/agentrl/cmd/agentrl/internal/bench"
)

// BenchDistCmd measures the distributed data plane at scale with a zero-latency generator.
type BenchDistCmd struct {
	Workers     int           `default:"8" help:"Worker processes."`
	Episodes    int           `default:"10000" help:"Episodes published at once (all in flight)."`
	Concurrency int           `default:"64" help:"Episodes one worker runs at once."`
	Env         string        `default:"calc" help:"Environment the episodes run."`
	Tokens      int           `default:"256" help:"Tokens of the fake generator's fixed completion."`
	Batch       int           `default:"256" help:"Trajectories per learner step."`
	Update      time.Duration `default:"100ms" help:"Simulated learner update per step in the second pass (0: capacity pass only)."`
	Checkpoint  int           `default:"4" help:"Learner steps between checkpoints (acknowledgements)."`
	WeightsMiB  int           `name:"weights-mib" default:"64" help:"Weights fanned out to every worker through the object store (0: skip)."`
	Worker      bool          `hidden:"" help:"Run as one of the bench's worker processes."`
}

// Run starts the worker processes and prints the measurements.
func (c *BenchDistCmd) Run(g *Globals) error {
	if c.Worker {
		return bench.DistWorker(g.Ctx, g.Envs)
	}
	exe, err := os.Executable()
	if err != nil {
		return errors.New("bench dist: cannot find this program to start its workers")
	}
	return bench.Dist(g.Ctx, g.Stdout, bench.DistOptions{Envs: g.Envs, Env: c.Env, Workers: c.Workers, Episodes: c.Episodes,
		Concurrency: c.Concurrency, Tokens: c.Tokens, Batch: c.Batch, Update: c.Update, Checkpoint: c.Checkpoint,
		WeightsMiB: c.WeightsMiB, WorkerCommand: []string{exe, "bench", "dist", "--worker"}})
}
