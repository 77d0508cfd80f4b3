package cli

import (
	"fmt"

	"github.com/agentrl/agentrl/pipeline"
)

// ReplayCmd trains a run's RL phases again from its recorded trajectories, without generating
// or running environments, and compares the metrics with the run's.
type ReplayCmd struct {
	Dir string `arg:"" name:"run" help:"The run directory (runs/NAME)."`
	Out string `help:"Directory for the replay's metrics.jsonl (default: RUN/replay)."`
}

// Run replays and says whether every RL metric matched the run's, timings aside. A mismatch is
// an error: the learner did not make the updates the run made.
func (c *ReplayCmd) Run(g *Globals) error {
	sum, err := pipeline.Replay(g.Ctx, c.Dir, pipeline.ReplayOptions{Out: g.Stdout, OutDir: c.Out, Opts: pipeline.Options{Envs: g.Envs, Terminal: isTerminal(g.Stdout)}})
	if err != nil {
		return err
	}
	fmt.Fprintf(g.Stdout, "replayed %d RL steps from %s into %s\n", sum.Steps, c.Dir, sum.Dir)
	if sum.Mismatch != "" {
		return fmt.Errorf("replay differs from the run: %s", sum.Mismatch)
	}
	fmt.Fprintf(g.Stdout, "all %d RL metrics lines identical to the run's (timings aside)\n", sum.Compared)
	return nil
}
