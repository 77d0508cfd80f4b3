package pipeline

import (
	"context"
	"fmt"
	"io"

	"github.com/agentrl/agentrl/checkpoint"
	"github.com/agentrl/agentrl/config"
	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/hub"
)

// TakeInitModel gives a configuration with init the checkpoint's architecture
// (config.TakeModel): it reads the checkpoint's config.json (from the Hub for hf:…, its config
// files alone), refuses a model setting that contradicts it, and validates the whole
// configuration with the model's shape. A configuration without init is left as it is. out
// receives the Hub's progress (nil: none).
func TakeInitModel(ctx context.Context, cfg *config.Config, envs *env.Registry, out io.Writer) error {
	if !cfg.ModelPending() {
		return nil
	}
	dir, err := hub.Resolve(ctx, cfg.Init, 0, out) // config.json and generation_config.json
	if err != nil {
		return fmt.Errorf("init: %w", err)
	}
	mc, err := checkpoint.ReadConfig(dir)
	if err != nil {
		return fmt.Errorf("init: %w", err)
	}
	if err := cfg.TakeModel(mc); err != nil {
		return fmt.Errorf("init: %w", err)
	}
	if err := cfg.Validate(envs); err != nil {
		return fmt.Errorf("pipeline: invalid config with init %s's model:\n%w", cfg.Init, err)
	}
	return nil
}
