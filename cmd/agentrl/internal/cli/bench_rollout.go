package cli

import (
	"github.com/agentrl/agentrl/cmd/agentrl/internal/bench"
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

// Run prints one table of throughput and overhead, the scaling ratios and the memory figure.
func (c *BenchRolloutCmd) Run(g *Globals) error {
	return bench.Rollout(g.Ctx, g.Stdout, bench.RolloutOptions{
		Registry: g.Envs, Envs: c.Envs, Concurrency: c.Concurrency, Episodes: c.Episodes, Scaling: c.Scaling, Rounds: c.Rounds,
		ResidentMiB: c.ResidentMiB, MemEpisodes: c.MemEpisodes, MemTokens: c.MemTokens,
	})
}
