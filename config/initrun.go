package config

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/agentrl/agentrl/checkpoint"
	"github.com/agentrl/agentrl/env"
)

// LoadFrom is Load for a run that starts from a checkpoint: after the preset (or file) and before
// the overrides, only the phases named in only are kept (none: all), init is the checkpoint
// (its architecture becomes the config's model block, its tokenizer the run's, and a
// rollout.max_context beyond its positions is lowered to them), so that `train --init CKPT --only
// rl` runs the preset's RL phase, with every default, from a supervised checkpoint. It returns
// what it changed, for the user.
func LoadFrom(envs *env.Registry, preset, path, init string, only, sets []string) (Config, []string, error) {
	c, err := Load(envs, preset, path, nil)
	if err != nil {
		return c, nil, err
	}
	var notes []string
	if len(only) > 0 {
		var keep []Phase
		var names []string
		for _, p := range c.Phases {
			names = append(names, p.Name)
			if slices.Contains(only, p.Name) {
				keep = append(keep, p)
			}
		}
		for _, n := range only {
			if !slices.Contains(names, n) {
				return c, nil, fmt.Errorf("pipeline: --only %s: the configuration has no phase %q (its phases: %s)", n, n, strings.Join(names, ", "))
			}
		}
		c.Phases = keep
		notes = append(notes, fmt.Sprintf("phases kept: %s (of %s)", strings.Join(only, ", "), strings.Join(names, ", ")))
	}
	if strings.HasPrefix(init, "hf:") {
		// A model on the Hub: as the configuration's init key, the run downloads it and takes
		// its architecture and tokenizer when it starts.
		c.Init = init
		notes = append(notes, fmt.Sprintf("init: %s, downloaded (or read from the cache) when the run starts", init))
	} else if init != "" {
		abs, err := filepath.Abs(init)
		if err != nil {
			return c, nil, err
		}
		ck, err := checkpoint.Load(abs)
		if err != nil {
			return c, nil, fmt.Errorf("pipeline: --init: %w", err)
		}
		m := ck.Model.Cfg
		m.Vocab = c.Model.Vocab
		if m != c.Model {
			notes = append(notes, fmt.Sprintf("model: the checkpoint's (dim %d, %d layers, %d heads, %d positions)", m.Dim, m.Layers, m.Heads, m.MaxSeq))
		}
		c.Init, c.Model, c.Tokenizer = abs, m, DefaultTokenizer()
		if c.Rollout.MaxContext > m.MaxSeq {
			notes = append(notes, fmt.Sprintf("rollout.max_context lowered from %d to the checkpoint's %d positions", c.Rollout.MaxContext, m.MaxSeq))
			c.Rollout.MaxContext = m.MaxSeq
		}
	}
	if len(sets) > 0 {
		if c, err = Override(c, sets); err != nil {
			return c, nil, err
		}
	}
	if len(c.Phases) == 0 {
		return c, nil, errors.New("pipeline: no phase left to train")
	}
	if err := c.Validate(envs); err != nil {
		return c, nil, fmt.Errorf("pipeline: invalid config:\n%w", err)
	}
	return c, notes, nil
}
