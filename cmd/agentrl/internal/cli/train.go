package cli

import (
	"context"
	"errors"
	"fmt"
	"os"

	"golang.org/x/term"

	"github.com/agentrl/agentrl/config"
	"github.com/agentrl/agentrl/pipeline"
)

// TrainCmd runs a training run: by default the calc preset (cold-start SFT on the noisy expert's
// demonstrations, then GRPO) with the built-in model.
type TrainCmd struct {
	Preset string   `help:"Built-in configuration (${presets}); default calc." placeholder:"NAME"`
	Config string   `help:"YAML configuration file (instead of a preset)." type:"existingfile" placeholder:"FILE"`
	Set    []string `help:"Override a setting, one KEY=VALUE per flag (the value is YAML, commas included), e.g. --set seed=2 --set phases.rl.steps=100 --set 'phases.rl.envs=[{name: calc, weight: 1}]'." placeholder:"KEY=VALUE" sep:"none"`
	Resume string   `help:"Continue the run in this directory from its latest checkpoint (its own config is used)." type:"existingdir" placeholder:"DIR"`
	Init   string   `help:"Start from this checkpoint's weights and tokenizer (its architecture becomes the model block): a folder, e.g. a supervised run's checkpoints/best, or hf:ORG/NAME[@REVISION] from the Hugging Face Hub." placeholder:"DIR|hf:ORG/NAME"`
	Only   []string `help:"Train only these phases of the preset or file, with their defaults, e.g. --only rl (with --init: RL from a checkpoint)." placeholder:"PHASE"`

	Dashboard       string `help:"Serve the run's dashboard (and Prometheus metrics on /metrics) on this address while it trains, e.g. 127.0.0.1:8090." placeholder:"ADDR"`
	DashboardPublic bool   `help:"Allow a non-loopback --dashboard address (needs --dashboard-key)."`
	DashboardKey    string `env:"AGENTRL_DASHBOARD_KEY" help:"Key required by the dashboard." placeholder:"KEY"`
}

// Run trains and prints held-out success before and after each phase.
func (c *TrainCmd) Run(g *Globals) error {
	opts := pipeline.Options{Out: g.Stdout, Terminal: isTerminal(g.Stdout), Envs: g.Envs}
	var run *pipeline.Run
	if c.Resume != "" {
		if c.Preset != "" || c.Config != "" || len(c.Set) > 0 || c.Init != "" || len(c.Only) > 0 {
			return errors.New("train --resume continues a run with its own config: --preset, --config, --set, --init and --only do nothing with it")
		}
		var err error
		fmt.Fprintf(g.Stderr, "resuming %s: loading its latest checkpoint\n", c.Resume)
		if run, err = pipeline.Resume(c.Resume, opts); err != nil {
			return err
		}
	} else {
		cfg, notes, err := config.LoadFrom(g.Envs, c.Preset, c.Config, c.Init, c.Only, c.Set)
		if err != nil {
			return err
		}
		for _, n := range notes {
			fmt.Fprintf(g.Stderr, "train: %s\n", n)
		}
		if run, err = pipeline.NewRun(cfg, opts); err != nil {
			return err
		}
	}
	if c.Dashboard != "" {
		stop, err := serveDashboard(g, c.Dashboard, c.DashboardPublic, c.DashboardKey, run.Dir)
		if err != nil {
			return err
		}
		defer stop()
	}
	_, err := run.Train(g.Ctx)
	if err != nil {
		if g.Ctx.Err() != nil && errors.Is(err, context.Canceled) {
			return &interrupted{msg: fmt.Sprintf("train %s stopped; its last checkpoint keeps its progress. Continue it with:\n  agentrl train --resume %s", run.Dir, shellQuote(run.Dir))}
		}
		return fmt.Errorf("train %s: %w", run.Dir, err)
	}
	return nil
}

func isTerminal(w any) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
