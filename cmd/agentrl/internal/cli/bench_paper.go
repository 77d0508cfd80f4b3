package cli

import "github.com/agentrl/agentrl/cmd/agentrl/internal/bench"

// BenchPaperCmd runs one of issue 17's comparisons: a paper's ordering measured at tiny scale on
// the built-in tasks, over seeds, with 95% intervals and whether the ordering reproduced.
type BenchPaperCmd struct {
	Name         string   `arg:"" help:"The comparison: retool (RL with the calculator vs without, calc vs calc-notool), search-r1 (tool-response tokens masked vs trained on, search), dapo (dynamic sampling on/off and clip-higher vs symmetric clip, calc and search), gigpo (GiGPO vs GRPO, maze), estimators or ppo-gae (PPO+GAE vs GRPO vs RLOO vs REINFORCE++, calc), gspo (GSPO and SAPO vs PPO-clip, search), distill (RL alone vs on-policy distillation from an RL-trained teacher, calc), distill-stages (calc then search RL with and without cross-stage distillation), folding (context folding vs truncation, ledger), delegation (sub-agents vs a single agent, parts)."`
	RunsDir      string   `name:"runs-dir" default:"runs" help:"Directory for the supervised checkpoints and the arms' runs."`
	Init         string   `help:"Supervised checkpoints to start RL from: DIR when the runs start from one preset's, else PRESET=DIR,… (default: train each preset's supervised phase first, seed 1). The fold and delegate arms start from their own, trained under their scaffold: ledger-fold=DIR, parts-delegate=DIR."`
	SFTSteps     int      `name:"sft-steps" help:"Supervised steps of a checkpoint trained here (default: the preset's)."`
	Arms         string   `help:"Comma-separated arms (default: every arm of the comparison)."`
	Presets      string   `help:"Comma-separated presets to compare on, of the comparison's (default: all; dapo compares on calc and search)."`
	Seeds        string   `default:"1,2,3" help:"Comma-separated RL seeds (the 95% intervals need two or more)."`
	Steps        int      `help:"RL steps per arm (default: the preset's)."`
	Every        int      `default:"10" help:"RL steps between the checkpoints evaluated on held-out tasks (must divide the steps)."`
	Tasks        int      `help:"Held-out tasks per evaluation (default: the preset's)."`
	Samples      int      `help:"Samples per task for the sampled pass@1 (default: the preset's)."`
	Set          []string `help:"Override a setting of every supervised phase and every arm alike." placeholder:"KEY=VALUE" sep:"none"`
	SVG          string   `name:"svg" help:"Where to draw the curves (default: RUNS-DIR/bench-paper-NAME.svg, with -PRESET before .svg when it runs on several)."`
	Teacher      string   `help:"distill: the teacher's checkpoint (default: train one, the preset's RL phase from --teacher-init for --teacher-steps)."`
	TeacherInit  string   `name:"teacher-init" help:"distill: the supervised checkpoint the trained teacher starts from (default: the student's)."`
	TeacherSteps int      `name:"teacher-steps" help:"distill: RL steps of the trained teacher (default: twice --steps)."`
	Quiet        bool     `help:"Print only the progress lines per arm and the tables."`
}

// Run trains every arm at every seed and prints the comparison.
func (c *BenchPaperCmd) Run(g *Globals) error {
	return bench.Paper(g.Ctx, g.Stdout, bench.PaperOptions{
		Envs: g.Envs, Name: c.Name, RunsDir: c.RunsDir, Init: c.Init, SFTSteps: c.SFTSteps, Arms: c.Arms, Presets: c.Presets, Seeds: c.Seeds, Steps: c.Steps,
		Every: c.Every, Tasks: c.Tasks, Samples: c.Samples, Set: c.Set, SVG: c.SVG, Teacher: c.Teacher, TeacherInit: c.TeacherInit, TeacherSteps: c.TeacherSteps, Quiet: c.Quiet, Terminal: isTerminal(g.Stdout),
	})
}
