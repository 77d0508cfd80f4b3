package config

import "github.com/agentrl/agentrl/model"

// MemoryUse is what the run does with its model, for model.EstimateMemory: training on the
// largest update any phase makes (sft.batch_size, or an RL minibatch, × rollout.max_context
// tokens), the adapters' state alone when every phase trains adapters (the largest of them),
// and the in-process engine's KV cache and packed weights.
func (c *Config) MemoryUse() model.MemoryUse {
	most := 0
	var lora *model.LoRAConfig
	allLoRA := len(c.Phases) > 0
	for _, p := range c.Phases {
		if p.LoRA == nil {
			allLoRA = false
		} else if lora == nil || c.Model.LoRAParams(*p.LoRA) > c.Model.LoRAParams(*lora) {
			lora = p.LoRA
		}
		switch {
		case p.SFT != nil:
			most = max(most, p.SFT.BatchSize)
		case p.RL != nil && p.RL.Minibatches > 0:
			eps := p.RL.GroupsPerStep * p.RL.GroupSize
			most = max(most, (eps+p.RL.Minibatches-1)/p.RL.Minibatches)
		}
	}
	prec := c.SamplingPrecision()
	if !allLoRA {
		lora = nil
	}
	return model.MemoryUse{LoRA: lora,
		Train: most > 0, TrainTokens: most * c.Rollout.MaxContext,
		CacheSlots: c.Rollout.EngineSlots, CacheLen: c.Rollout.MaxContext, CachePrecision: prec.KVCache,
		DecodeWeights: prec.Weights,
	}
}
