package bench

import (
	"context"
	"fmt"
	"github.com/agentrl/agentrl/config"
	"github.com/agentrl/agentrl/env"
	"io"
	"math"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/agentrl/agentrl/pipeline"
)

// TrainOptions says what Train runs; `agentrl bench train` documents each field.
type TrainOptions struct {
	Envs   *env.Registry // the environments the runs may use
	Preset string        // the built-in configuration
	Seeds  string        // comma-separated seeds, one full run each
	Set    []string      // overrides (KEY=VALUE) applied to every run
	Quiet  bool          // print only the table, not each run's progress
	// Terminal says w is a terminal, where runs redraw their progress line.
	Terminal bool
}

// Train trains the same configuration once per seed and prints to w the per-run evaluations,
// how much RL lifts held-out pass@1 over the supervised checkpoint (mean and spread), and wall
// time.
func Train(ctx context.Context, w io.Writer, c TrainOptions) error {
	type row struct {
		seed  uint64
		evals []pipeline.EvalReport
		wall  time.Duration
	}
	var rows []row
	for _, s := range splitList(c.Seeds) {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return fmt.Errorf("bench train: bad seed %q", s)
		}
		sets := append([]string{"seed=" + s, fmt.Sprintf("name=bench-%s-seed%s", c.Preset, s)}, c.Set...)
		cfg, err := config.Load(c.Envs, c.Preset, "", sets)
		if err != nil {
			return err
		}
		opts := pipeline.Options{Out: w, Terminal: c.Terminal, Envs: c.Envs}
		if c.Quiet {
			opts.Out = nil
		}
		run, err := pipeline.NewRun(cfg, opts)
		if err != nil {
			return err
		}
		t0 := time.Now()
		sum, err := run.Train(ctx)
		if err != nil {
			return err
		}
		rows = append(rows, row{seed: seed, evals: sum.Evals, wall: time.Since(t0)})
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "seed\tenv\tpass@1 sampled: before -> first phase -> last phase\tlift\tgreedy: first -> last\tgreedy lift\ttool use (sampled)\twall\n")
	var lifts, greedyLifts []float64
	for _, r := range rows {
		if len(r.evals) < 3 {
			continue
		}
		before, first, last := r.evals[0], r.evals[1], r.evals[len(r.evals)-1]
		for i, e := range last.Envs {
			f := first.Envs[i]
			if e.Pass1Sampled == nil || f.Pass1Sampled == nil {
				continue
			}
			lift, glift := *e.Pass1Sampled-*f.Pass1Sampled, e.Pass1Greedy-f.Pass1Greedy
			lifts, greedyLifts = append(lifts, lift), append(greedyLifts, glift)
			fmt.Fprintf(tw, "%d\t%s\t%.1f%% -> %.1f%% -> %.1f%%\t%+.1f\t%.1f%% -> %.1f%%\t%+.1f\t%.0f%% -> %.0f%%\t%s\n", r.seed, e.Env,
				100**before.Envs[i].Pass1Sampled, 100**f.Pass1Sampled, 100**e.Pass1Sampled, 100*lift,
				100*f.Pass1Greedy, 100*e.Pass1Greedy, 100*glift,
				100**f.ToolUseSampled, 100**e.ToolUseSampled, r.wall.Round(time.Second))
		}
	}
	tw.Flush()
	for _, l := range []struct {
		name string
		v    []float64
	}{{"sampled", lifts}, {"greedy", greedyLifts}} {
		if mean, sd, ok := meanStd(l.v); ok {
			fmt.Fprintf(w, "held-out pass@1 (%s) lift of the last phase over the first: mean %+.1f points, std %.1f, over %d runs\n", l.name, 100*mean, 100*sd, len(l.v))
		}
	}
	return nil
}

// meanStd is the mean and the sample standard deviation of v.
func meanStd(v []float64) (mean, sd float64, ok bool) {
	if len(v) == 0 {
		return 0, 0, false
	}
	for _, x := range v {
		mean += x
	}
	mean /= float64(len(v))
	if len(v) > 1 {
		var ss float64
		for _, x := range v {
			ss += (x - mean) * (x - mean)
		}
		sd = math.Sqrt(ss / float64(len(v)-1))
	}
	return mean, sd, true
}
