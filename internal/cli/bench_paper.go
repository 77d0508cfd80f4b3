package cli

import "github.com/agentrl/agentrl/internal/bench"

// BenchPaperCmd groups the learning comparisons of issue 17: a paper's ordering measured at tiny
// scale on the built-in tasks, over seeds.
type BenchPaperCmd struct {
	PPOGAE BenchPaperPPOGAECmd `cmd:"" name:"ppo-gae" help:"PPO with GAE and a learned value vs GRPO vs RLOO vs REINFORCE++ on calc: held-out success per trained episode and per second."`
	Retool BenchRetoolCmd      `cmd:"" help:"ReTool: RL with the calculator vs RL on the same tasks without it (calc vs calc-notool)."`
}

// BenchRetoolCmd compares RL with and without the calculator.
type BenchRetoolCmd struct {
	Seeds string   `help:"Comma-separated seeds, one full run per arm each." default:"1,2,3"`
	Set   []string `help:"Override a setting in every run of both arms." placeholder:"KEY=VALUE"`
	Quiet bool     `help:"Print only the table, not each run's progress."`
}

// Run trains both arms once per seed and prints held-out success and response length.
func (c *BenchRetoolCmd) Run(g *Globals) error {
	return bench.PaperRetool(g.Ctx, g.Stdout, bench.RetoolOptions{
		Envs: g.Envs, Seeds: c.Seeds, Set: c.Set, Quiet: c.Quiet, Terminal: isTerminal(g.Stdout),
	})
}

// BenchPaperPPOGAECmd runs PPO+GAE, GRPO, RLOO and REINFORCE++ from one supervised checkpoint on
// calc, over seeds, and prints the held-out success each reaches per trained episode and per
// second of RL, with 95% intervals and the ordering they resolve.
type BenchPaperPPOGAECmd struct {
	RunsDir  string   `name:"runs-dir" default:"runs" help:"Directory for the supervised checkpoint and the arms' runs."`
	Init     string   `help:"Supervised checkpoint to start every arm's RL from (default: train one first, with --sft-steps)."`
	SFTSteps int      `name:"sft-steps" default:"3000" help:"Supervised steps of the checkpoint trained when --init is not given."`
	Arms     string   `default:"ppo-gae,grpo,rloo,reinforce++" help:"Comma-separated arms: ppo-gae, grpo, rloo, reinforce++."`
	Seeds    string   `default:"1,2,3" help:"Comma-separated RL seeds (the 95% intervals need two or more)."`
	Steps    int      `default:"100" help:"RL steps per arm (the calc preset's)."`
	Every    int      `default:"10" help:"RL steps between the checkpoints evaluated on held-out tasks (must divide --steps)."`
	Tasks    int      `default:"200" help:"Held-out tasks per evaluation (the calc preset's)."`
	Samples  int      `default:"4" help:"Samples per task for the sampled pass@1."`
	Set      []string `help:"Override a setting of every arm." placeholder:"KEY=VALUE"`
	SVG      string   `name:"svg" help:"Where to draw the held-out pass@1 curves (default: RUNS-DIR/bench-paper-ppo-gae.svg)."`
	Quiet    bool     `help:"Print only the progress lines per arm and the tables."`
}

// Run trains every arm at every seed and prints the comparison.
func (c *BenchPaperPPOGAECmd) Run(g *Globals) error {
	return bench.PaperPPOGAE(g.Ctx, g.Stdout, bench.PaperOptions{
		Envs: g.Envs, RunsDir: c.RunsDir, Init: c.Init, SFTSteps: c.SFTSteps, Arms: c.Arms, Seeds: c.Seeds, Steps: c.Steps,
		Every: c.Every, Tasks: c.Tasks, Samples: c.Samples, Set: c.Set, SVG: c.SVG, Quiet: c.Quiet, Terminal: isTerminal(g.Stdout),
	})
}
