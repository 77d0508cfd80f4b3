package pipeline

import (
	"fmt"
	"slices"
	"strings"

	"github.com/agentrl/agentrl/config"
	"github.com/agentrl/agentrl/env"
)

// checkDelegateTools refuses rollout.delegate.tools naming a tool that none of the phase's
// environments has (with the run's MCP tools attached): such a name would do nothing. It makes
// one instance of each environment to read its tools, before any episode runs.
func (r *Run) checkDelegateTools(p config.Phase) error {
	d := r.Cfg.Rollout.Delegate
	if d == nil || len(d.Tools) == 0 {
		return nil
	}
	var have []string
	for _, ew := range p.Envs {
		spec, err := r.opts.Envs.Lookup(ew.Name)
		if err != nil {
			return err
		}
		e, err := r.mcp.Spec(spec).New()
		if err != nil {
			return fmt.Errorf("phase %s: rollout.delegate.tools: make %s to read its tools: %w", p.Name, ew.Name, err)
		}
		for _, t := range env.ToolsOf(e) {
			have = append(have, t.Name())
		}
		if c, ok := e.(env.Closer); ok {
			c.Close()
		}
	}
	for _, n := range d.Tools {
		if !slices.Contains(have, n) {
			slices.Sort(have)
			return fmt.Errorf("phase %s: rollout.delegate.tools names %q, a tool of none of the phase's environments (their tools: %s)", p.Name, n, strings.Join(slices.Compact(have), ", "))
		}
	}
	return nil
}
