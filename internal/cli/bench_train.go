package cli

import (
	"fmt"
	"math"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/agentrl/agentrl/pipeline"
)

// BenchTrainCmd trains the same configuration with several seeds and reports how much RL lifts
// held-out pass@1 over the supervised checkpoint, with its spread.
type BenchTrainCmd struct {
	Preset string   `help:"Built-in configuration (${presets})." default:"calc"`
	Seeds  string   `help:"Comma-separated seeds, one full run each." default:"1,2,3"`
	Set    []string `help:"Override a setting in every run." placeholder:"KEY=VALUE"`
	Quiet  bool     `help:"Print only the table, not each run's progress."`
}

// Run trains once per seed and prints the per-run evaluations, the RL lift's mean and spread,
// and wall time.
func (c *BenchTrainCmd) Run(g *Globals) error {
	type row struct {
		seed             uint64
		evals            []pipeline.EvalReport
		wall             time.Duration
		toolSFT, toolEnd float64
	}
	var rows []row
	for _, s := range splitList(c.Seeds) {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return fmt.Errorf("bench train: bad seed %q", s)
		}
		sets := append([]string{"seed=" + s, fmt.Sprintf("name=bench-%s-seed%s", c.Preset, s)}, c.Set...)
		cfg, err := pipeline.Load(c.Preset, "", sets)
		if err != nil {
			return err
		}
		opts := pipeline.Options{Out: g.Stdout, Terminal: isTerminal(g.Stdout)}
		if c.Quiet {
			opts.Out = nil
		}
		run, err := pipeline.NewRun(cfg, opts)
		if err != nil {
			return err
		}
		t0 := time.Now()
		sum, err := run.Train(g.Ctx)
		if err != nil {
			return err
		}
		rows = append(rows, row{seed: seed, evals: sum.Evals, wall: time.Since(t0)})
	}
	w := tabwriter.NewWriter(g.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "seed\tenv\tbefore\tafter first phase\tafter last phase\tlift (last - first)\ttool use (first -> last)\twall\n")
	var lifts []float64
	for _, r := range rows {
		if len(r.evals) < 3 {
			continue
		}
		first, last := r.evals[1], r.evals[len(r.evals)-1]
		for i, e := range last.Envs {
			lift := e.Pass1Greedy - first.Envs[i].Pass1Greedy
			lifts = append(lifts, lift)
			fmt.Fprintf(w, "%d\t%s\t%.1f%%\t%.1f%%\t%.1f%%\t%+.1f\t%.0f%% -> %.0f%%\t%s\n", r.seed, e.Env,
				100*r.evals[0].Envs[i].Pass1Greedy, 100*first.Envs[i].Pass1Greedy, 100*e.Pass1Greedy, 100*lift,
				100*first.Envs[i].ToolUseRate, 100*e.ToolUseRate, r.wall.Round(time.Second))
		}
	}
	w.Flush()
	if len(lifts) > 0 {
		var mean, ss float64
		for _, l := range lifts {
			mean += l
		}
		mean /= float64(len(lifts))
		for _, l := range lifts {
			ss += (l - mean) * (l - mean)
		}
		sd := 0.0
		if len(lifts) > 1 {
			sd = math.Sqrt(ss / float64(len(lifts)-1))
		}
		fmt.Fprintf(g.Stdout, "held-out pass@1 lift of the last phase over the first: mean %+.1f points, std %.1f, over %d runs\n", 100*mean, 100*sd, len(lifts))
	}
	return nil
}
