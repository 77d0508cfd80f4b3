package cli

import "github.com/agentrl/agentrl/internal/bench"

// BenchPaperCmd groups the papers' orderings measured on the built-in tasks.
type BenchPaperCmd struct {
	Retool BenchRetoolCmd `cmd:"" help:"ReTool: RL with the calculator vs RL on the same tasks without it (calc vs calc-notool)."`
}

// BenchRetoolCmd compares RL with and without the calculator.
type BenchRetoolCmd struct {
	Seeds string   `help:"Comma-separated seeds, one full run per arm each." default:"1,2,3"`
	Set   []string `help:"Override a setting in every run of both arms." placeholder:"KEY=VALUE"`
	Quiet bool     `help:"Print only the table, not each run's progress."`
}

// Run trains both arms once per seed and prints held-out success and response length.
func (c *BenchRetoolCmd) Run(g *Globals) error {
	return bench.PaperRetool(g.Ctx, g.Stdout, bench.PaperOptions{
		Envs: g.Envs, Seeds: c.Seeds, Set: c.Set, Quiet: c.Quiet, Terminal: isTerminal(g.Stdout),
	})
}
