package cli

import (
	"github.com/agentrl/agentrl/config"
	"github.com/agentrl/agentrl/pipeline"
)

// ConfigCmd inspects configurations.
type ConfigCmd struct {
	Show ConfigShowCmd `cmd:"" help:"Print the fully resolved configuration (a preset or a file, with overrides)."`
}

// ConfigShowCmd prints a resolved configuration as YAML.
type ConfigShowCmd struct {
	Preset string   `help:"Built-in configuration (${presets}); default calc." placeholder:"NAME"`
	Config string   `help:"YAML configuration file." type:"existingfile" placeholder:"FILE"`
	Set    []string `help:"Override a setting, one KEY=VALUE per flag (the value is YAML, commas included)." placeholder:"KEY=VALUE" sep:"none"`
}

// Run prints the configuration; with init, its model is the checkpoint's architecture, as a
// run takes it.
func (c *ConfigShowCmd) Run(g *Globals) error {
	cfg, err := config.Load(g.Envs, c.Preset, c.Config, c.Set)
	if err != nil {
		return err
	}
	if err := pipeline.TakeInitModel(g.Ctx, &cfg, g.Envs, g.Stderr); err != nil {
		return err
	}
	data, err := config.Encode(cfg)
	if err != nil {
		return err
	}
	_, err = g.Stdout.Write(data)
	return err
}
