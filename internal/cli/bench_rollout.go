package cli

import (
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/agentrl/agentrl/internal/benchrollout"
)

// BenchRolloutCmd measures the agent loop with a zero-latency scripted generator.
type BenchRolloutCmd struct {
	Envs        string `help:"Comma-separated environments." default:"calc,search,maze,code"`
	Concurrency string `help:"Comma-separated concurrency levels." default:"1,64,1024,10000"`
	Episodes    int    `help:"Episodes per measurement (at least the concurrency)." default:"2000"`
	Scaling     string `help:"Comma-separated environments measured at GOMAXPROCS 1 and 2." default:"calc,search"`
	Rounds      int    `help:"Repetitions of the overhead and scaling measurements (median and range reported)." default:"5"`
	ResidentMiB int    `name:"resident-mib" help:"Hold this much pointer-free memory while measuring, as a trainer holds its weights: the collector then runs as rarely as it would there and the heap stays mapped between runs (0 = the bare benchmark process)." default:"0"`
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
	tok, err := benchrollout.Tokenizer(g.Envs, envs)
	if err != nil {
		return err
	}
	w := tabwriter.NewWriter(g.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	// Throughput is measured on both cores ("cores used" says how much of them the process got
	// on a shared machine); the overhead per step on one core, where process CPU time is not
	// inflated by the garbage collector's workers running beside the loop.
	fmt.Fprintf(w, "env\tconcurrency\tepisodes\tepisodes/s (2 cores)\tsteps/s (2 cores)\tcores used\toverhead/step (1 core, median of %d)\tof which GC\trange\t\n", c.Rounds)
	for _, name := range envs {
		for _, n := range levels {
			episodes := max(c.Episodes, n)
			r, err := benchrollout.Measure(g.Ctx, g.Envs, name, tok, 2, n, episodes)
			if err != nil {
				return err
			}
			over, err := benchrollout.MeasureOverhead(g.Ctx, g.Envs, name, tok, n, episodes, c.Rounds)
			if err != nil {
				return err
			}
			med := over[len(over)/2]
			fmt.Fprintf(w, "%s\t%d\t%d\t%.0f\t%.0f\t%.2f\t%s\t%s\t%s – %s\t\n", r.Env, r.Concurrency, r.Episodes, r.EpisodesPerSec(), r.StepsPerSec(), r.Cores(),
				med.PerStep, med.GC, over[0].PerStep, over[len(over)-1].PerStep)
		}
	}
	w.Flush()
	// Scaling alternates one core and two, so that a change in the machine's load hits both. On
	// a shared machine the wall-clock ratio is bounded by the cores the process got; CPU time
	// per step says whether the work itself grows with the second core.
	for _, name := range splitList(c.Scaling) {
		var ratios []float64
		var one, two benchrollout.Result
		for i := 0; i < c.Rounds; i++ {
			if one, err = benchrollout.Measure(g.Ctx, g.Envs, name, tok, 1, 64, c.Episodes); err != nil {
				return err
			}
			if two, err = benchrollout.Measure(g.Ctx, g.Envs, name, tok, 2, 64, c.Episodes); err != nil {
				return err
			}
			ratios = append(ratios, two.StepsPerSec()/one.StepsPerSec())
		}
		slices.Sort(ratios)
		fmt.Fprintf(g.Stdout, "scaling %s (concurrency 64, %d rounds): 2 cores / 1 core = %.2fx median, %.2fx – %.2fx; last round %.0f steps/s on 1 core, %.0f on 2 using %.2f cores, CPU/step %s on 1, %s on 2\n",
			name, c.Rounds, ratios[len(ratios)/2], ratios[0], ratios[len(ratios)-1], one.StepsPerSec(), two.StepsPerSec(), two.Cores(), one.CPUPerStep(), two.CPUPerStep())
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
