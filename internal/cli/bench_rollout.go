package cli

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	_ "github.com/agentrl/agentrl/env/all" // the built-in environments
	"github.com/agentrl/agentrl/internal/benchrollout"
)

// BenchRolloutCmd measures the agent loop with a zero-latency scripted generator.
type BenchRolloutCmd struct {
	Envs        string `help:"Comma-separated environments." default:"calc,search,maze,code"`
	Concurrency string `help:"Comma-separated concurrency levels." default:"1,64,1024,10000"`
	Episodes    int    `help:"Episodes per measurement (at least the concurrency)." default:"2000"`
	Scaling     string `help:"Comma-separated environments measured at GOMAXPROCS 1 and 2." default:"calc,search"`
	MemEpisodes int    `help:"Episodes held in flight for the memory measurement." default:"10000"`
	MemTokens   int    `help:"Tokens per episode in the memory measurement." default:"1000"`
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// Run prints one table of throughput and overhead, the scaling ratios and the memory figure.
func (c *BenchRolloutCmd) Run(g *Globals) error {
	envs := splitList(c.Envs)
	var levels []int
	for _, s := range splitList(c.Concurrency) {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return fmt.Errorf("bench rollout: bad concurrency %q", s)
		}
		levels = append(levels, n)
	}
	tok, err := benchrollout.Tokenizer(envs)
	if err != nil {
		return err
	}
	w := tabwriter.NewWriter(g.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	// Throughput is measured on both cores; the overhead per step on one core (where process CPU
	// time is not inflated by the garbage collector running beside the loop), as the median of
	// three runs against three baselines.
	fmt.Fprintln(w, "env\tconcurrency\tepisodes\tepisodes/s (2 cores)\tsteps/s (2 cores)\toverhead/step (1 core, median of 3)\t")
	for _, name := range envs {
		for _, n := range levels {
			r, err := benchrollout.Measure(g.Ctx, name, tok, 2, n, max(c.Episodes, n))
			if err != nil {
				return err
			}
			var over []time.Duration
			for i := 0; i < 3; i++ {
				o, err := benchrollout.Measure(g.Ctx, name, tok, 1, n, max(c.Episodes, n))
				if err != nil {
					return err
				}
				over = append(over, o.OverheadPerStep())
			}
			slices.Sort(over)
			fmt.Fprintf(w, "%s\t%d\t%d\t%.0f\t%.0f\t%s\t\n", r.Env, r.Concurrency, r.Episodes, r.EpisodesPerSec(), r.StepsPerSec(), over[1])
		}
	}
	w.Flush()
	for _, name := range splitList(c.Scaling) {
		one, err := benchrollout.Measure(g.Ctx, name, tok, 1, 64, c.Episodes)
		if err != nil {
			return err
		}
		two, err := benchrollout.Measure(g.Ctx, name, tok, 2, 64, c.Episodes)
		if err != nil {
			return err
		}
		fmt.Fprintf(g.Stdout, "scaling %s: %.0f steps/s on 1 core, %.0f on 2: %.2fx\n", name, one.StepsPerSec(), two.StepsPerSec(), two.StepsPerSec()/one.StepsPerSec())
	}
	if c.MemEpisodes > 0 {
		m, err := benchrollout.Memory(g.Ctx, tok, c.MemEpisodes, c.MemTokens)
		if err != nil {
			return err
		}
		fmt.Fprintf(g.Stdout, "memory: %d episodes of %d tokens in flight: %.1f MiB (heap %.1f MiB, stacks %.1f MiB), %.1f KiB per episode\n",
			m.Episodes, m.TokensEach, float64(m.TotalInFlight)/(1<<20), float64(m.HeapBytes)/(1<<20), float64(m.StackBytes)/(1<<20), m.PerEpisode/1024)
	}
	return nil
}
