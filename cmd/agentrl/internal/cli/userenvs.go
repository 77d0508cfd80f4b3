package cli

import (
	"fmt"

	"github.com/agentrl/agentrl/config"
	"github.com/agentrl/agentrl/env/remote"
)

// withConfiguredEnvs opens the remote environments that the run configuration at path defines
// (entries with a remote block) and returns Globals whose registry holds them beside g's; no
// path, or a configuration that defines none, changes nothing. The caller closes the pools.
func withConfiguredEnvs(g *Globals, cmd, path string) (*Globals, remote.Pools, error) {
	if path == "" {
		return g, nil, nil
	}
	cfg, err := config.DecodeFile(path)
	if err != nil {
		return nil, nil, err
	}
	defs := cfg.RemoteEnvs()
	if len(defs) == 0 {
		return g, nil, nil
	}
	// The same checks as a run's: each block valid, one definition per name, no taken name.
	if err := cfg.ValidateRemoteEnvs(g.Envs); err != nil {
		return nil, nil, fmt.Errorf("%s: %s: %w", cmd, path, err)
	}
	reg := g.Envs.Clone()
	pools, err := remote.Register(g.Ctx, reg, defs, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", cmd, err)
	}
	out := *g
	out.Envs = reg
	return &out, pools, nil
}
