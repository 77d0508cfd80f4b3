package config

import "github.com/agentrl/agentrl/infer/remote"

// publishes is what the run's RL phases publish to the generation servers: full weights for a
// phase that trains them, adapters for one with a lora block.
func (c *Config) publishes() remote.Publish {
	var p remote.Publish
	for _, ph := range c.Phases {
		switch {
		case ph.Kind != "rl":
		case ph.LoRA != nil:
			p |= remote.PublishAdapters
		default:
			p |= remote.PublishWeights
		}
	}
	return p
}
