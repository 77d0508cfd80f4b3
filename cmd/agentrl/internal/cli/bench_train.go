package cli

import "github.com/agentrl/agentrl/cmd/agentrl/internal/bench"

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
	return bench.Train(g.Ctx, g.Stdout, bench.TrainOptions{
		Envs: g.Envs, Preset: c.Preset, Seeds: c.Seeds, Set: c.Set, Quiet: c.Quiet, Terminal: isTerminal(g.Stdout),
	})
}
