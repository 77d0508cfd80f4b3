package bench

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"

	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/pipeline"
)

// RetoolOptions says what `agentrl bench paper retool` runs; the command documents each field.
type RetoolOptions struct {
	Envs  *env.Registry // the environments the runs may use
	Seeds string        // comma-separated seeds, one full run per arm each
	Set   []string      // overrides (KEY=VALUE) applied to every run of every arm
	Quiet bool          // print only the table, not each run's progress
	// Terminal says w is a terminal, where runs redraw their progress line.
	Terminal bool
}

// retoolArms are ReTool's (arXiv 2504.11536) two arms: RL with the calculator, and RL on the
// same tasks (calc-notool: the same seeds) with no tool. Each is its preset, SFT then RL,
// untuned beyond it; the overrides apply to both alike.
var retoolArms = []string{"calc", "calc-notool"}

// PaperRetool trains each arm once per seed and prints, per arm, the held-out pass@1 (sampled
// and greedy) and the policy's tokens per greedy episode after the last phase, as mean ± the
// half-width of the 95% Student-t interval over seeds.
func PaperRetool(ctx context.Context, w io.Writer, c RetoolOptions) error {
	type result struct{ pass1, greedy, resp []float64 }
	res := map[string]*result{}
	seeds := splitList(c.Seeds)
	if len(seeds) == 0 {
		return fmt.Errorf("bench paper retool: no seeds")
	}
	for _, arm := range retoolArms {
		res[arm] = &result{}
		for _, s := range seeds {
			if _, err := strconv.ParseUint(s, 10, 64); err != nil {
				return fmt.Errorf("bench paper retool: bad seed %q", s)
			}
			sets := append([]string{"seed=" + s, fmt.Sprintf("name=paper-retool-%s-seed%s", arm, s)}, c.Set...)
			cfg, err := pipeline.Load(c.Envs, arm, "", sets)
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
			sum, err := run.Train(ctx)
			if err != nil {
				return err
			}
			last := sum.Evals[len(sum.Evals)-1]
			for _, e := range last.Envs {
				if e.Env != arm || e.Pass1Sampled == nil {
					continue
				}
				r := res[arm]
				r.pass1 = append(r.pass1, 100**e.Pass1Sampled)
				r.greedy = append(r.greedy, 100*e.Pass1Greedy)
				r.resp = append(r.resp, e.MeanResponseTokens)
			}
		}
	}
	fmt.Fprintf(w, "\nReTool: RL with the calculator vs RL on the same tasks without it; held-out, after the last phase, %d seeds (mean ± 95%% interval)\n", len(seeds))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "arm\truns\tpass@1 sampled %%\tpass@1 greedy %%\tpolicy tokens per episode\n")
	for _, arm := range retoolArms {
		r := res[arm]
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", arm, len(r.pass1), meanInterval(r.pass1, "%.1f"), meanInterval(r.greedy, "%.1f"), meanInterval(r.resp, "%.1f"))
	}
	return tw.Flush()
}
