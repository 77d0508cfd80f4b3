package cli

import "github.com/agentrl/agentrl/cmd/agentrl/internal/bench"

// BenchPrecisionCmd compares RL on calc sampled in f32 against bf16 (rollout.precision: weights,
// KV cache or both), from one supervised checkpoint over seeds.
type BenchPrecisionCmd struct {
	RunsDir  string   `name:"runs-dir" default:"runs" help:"Directory for the supervised checkpoint and the arms' runs."`
	Init     string   `help:"Supervised checkpoint to start every arm's RL from (default: train one first, with --sft-steps)." placeholder:"DIR"`
	SFTSteps int      `name:"sft-steps" default:"3000" help:"Supervised steps of the checkpoint trained when --init is not given."`
	Arms     string   `default:"f32,bf16" help:"Comma-separated arms, the first the baseline of the paired differences: f32, bf16 (weights and KV cache), bf16-weights, bf16-kv."`
	Seeds    string   `default:"1,2,3" help:"Comma-separated RL seeds; each trains every arm (the 95% intervals need two or more)."`
	Steps    int      `default:"100" help:"RL steps per arm (the calc preset's)."`
	Every    int      `default:"20" help:"RL steps between the checkpoints evaluated on held-out tasks (must divide --steps)."`
	Tasks    int      `default:"200" help:"Held-out tasks per evaluation (the calc preset's)."`
	Samples  int      `default:"4" help:"Samples per task for the sampled pass@1."`
	Set      []string `help:"Override a setting of both arms." placeholder:"KEY=VALUE" sep:"none"`
	Quiet    bool     `help:"Print only a line per arm and the tables."`
}

// Run trains both arms at every seed and prints the comparison.
func (c *BenchPrecisionCmd) Run(g *Globals) error {
	return bench.Precision(g.Ctx, g.Stdout, bench.PrecisionOptions{
		Envs: g.Envs, RunsDir: c.RunsDir, Init: c.Init, SFTSteps: c.SFTSteps, Arms: c.Arms, Seeds: c.Seeds, Steps: c.Steps, Every: c.Every,
		Tasks: c.Tasks, Samples: c.Samples, Set: c.Set, Quiet: c.Quiet, Terminal: isTerminal(g.Stdout),
	})
}
