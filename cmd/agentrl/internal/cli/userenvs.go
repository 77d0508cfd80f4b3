package cli

import (
	"fmt"

	"github.com/agentrl/agentrl/config"
	"github.com/agentrl/agentrl/pipeline"
)

// withConfiguredEnvs opens the environments that the run configuration at path defines (entries
// with a remote or tasks block) and returns Globals whose registry holds them beside g's; no
// path, or a configuration that defines none, changes nothing. The caller closes what it returns.
func withConfiguredEnvs(g *Globals, cmd, path string) (*Globals, *pipeline.UserEnvs, error) {
	if path == "" {
		return g, &pipeline.UserEnvs{Envs: g.Envs}, nil
	}
	cfg, err := config.DecodeFile(path)
	if err != nil {
		return nil, nil, err
	}
	// The same checks as a run's: each block valid, one definition per name, no taken name.
	if err := cfg.ValidateUserEnvs(g.Envs); err != nil {
		return nil, nil, fmt.Errorf("%s: %s: %w", cmd, path, err)
	}
	user, err := pipeline.OpenUserEnvs(g.Ctx, g.Envs, cfg, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", cmd, err)
	}
	out := *g
	out.Envs = user.Envs
	return &out, user, nil
}
