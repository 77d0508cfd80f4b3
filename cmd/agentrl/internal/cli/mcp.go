package cli

import (
	"fmt"

	"github.com/agentrl/agentrl/config"
	"github.com/agentrl/agentrl/env/mcp"
)

// connectMCP connects the MCP servers that the run configuration at path attaches to envName;
// no path connects nothing (a nil *mcp.Toolbox attaches nothing). A configuration that attaches
// nothing to envName is an error: --config would do nothing.
func connectMCP(g *Globals, cmd, path, envName string) (*mcp.Toolbox, error) {
	if path == "" {
		return nil, nil
	}
	// The whole file is decoded strictly, as train reads it, so a misspelt key anywhere in it is
	// an error here too; only its mcp block is validated and used.
	cfg, err := config.DecodeFile(path)
	if err != nil {
		return nil, err
	}
	m := cfg.MCP
	if m != nil {
		used := map[string]bool{}
		for _, p := range cfg.Phases {
			for _, e := range p.Envs {
				used[e.Name] = true
			}
		}
		if err := m.Validate(g.Envs, used); err != nil {
			return nil, fmt.Errorf("%s: %s: invalid mcp block:\n%w", cmd, path, err)
		}
	}
	if m == nil || len(m.Envs[envName]) == 0 {
		return nil, fmt.Errorf("%s: %s attaches no MCP tools to environment %s (mcp.envs.%s)", cmd, path, envName, envName)
	}
	tools, err := mcp.Connect(g.Ctx, g.Envs, m, envName)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cmd, err)
	}
	return tools, nil
}
