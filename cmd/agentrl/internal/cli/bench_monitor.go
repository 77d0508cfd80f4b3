package cli

import (
	"github.com/agentrl/agentrl/cmd/agentrl/internal/bench"
)

// BenchMonitorCmd measures one of the monitor's actions, with against without, over seeds.
type BenchMonitorCmd struct {
	Action    string   `arg:"" enum:"entropy,tasks,shift" help:"The action: entropy (the entropy controller, on search), tasks (difficulty-aware task sampling, on maze) or shift (the shift controller, on calc with asynchronous RL)."`
	Seeds     string   `default:"1,2,3" help:"Comma-separated RL seeds; each trains the action off and on."`
	RunsDir   string   `name:"runs-dir" default:"runs" help:"Directory for the supervised checkpoint and the arms' runs."`
	Init      string   `help:"Supervised checkpoint to start every arm's RL from (default: train the preset's supervised phase first)." placeholder:"DIR"`
	SFTPer    bool     `name:"sft-per-seed" help:"Train a supervised checkpoint per seed, with that seed, instead of one (seed 1) shared by every seed."`
	SFTSteps  int      `name:"sft-steps" help:"Supervised steps of the checkpoint trained when --init is not given (default: the preset's)."`
	Steps     int      `help:"RL steps per arm (default: the preset's)."`
	Tasks     int      `help:"Held-out tasks per evaluation (default: the preset's)."`
	Samples   int      `help:"Samples per task of the sampled pass@1 (default: the preset's)."`
	Set       []string `help:"Override a setting of both arms." placeholder:"KEY=VALUE" sep:"none"`
	ActionSet []string `name:"action-set" help:"The on arm's settings of the action, replacing its defaults (e.g. 'monitor.entropy_control={…}')." placeholder:"KEY=VALUE" sep:"none"`
	Quiet     bool     `help:"Print only a line per arm and the tables."`
}

// Run trains both arms at every seed and prints the comparison.
func (c *BenchMonitorCmd) Run(g *Globals) error {
	return bench.Monitor(g.Ctx, g.Stdout, bench.MonitorOptions{
		Envs: g.Envs, Action: c.Action, RunsDir: c.RunsDir, Init: c.Init, SFTPer: c.SFTPer, SFTSteps: c.SFTSteps,
		Seeds: c.Seeds, Steps: c.Steps, Tasks: c.Tasks, Samples: c.Samples, Set: c.Set, ActionSet: c.ActionSet,
		Quiet: c.Quiet, Terminal: isTerminal(g.Stdout),
	})
}
