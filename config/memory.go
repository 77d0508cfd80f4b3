package config

import "github.com/agentrl/agentrl/model"

// MemoryUse is what the run does with its model, for model.EstimateMemory: training on the
// largest update any phase makes (sft.batch_size, or an RL minibatch, × rollout.max_context
// tokens), and the in-process engine's KV cache and packed weights.
func (c *Config) MemoryUse() model.MemoryUse {
	most := 0
	for _, p := range c.Phases {
		switch {
		case p.SFT != nil:
			most = max(most, p.SFT.BatchSize)
		case p.RL != nil && p.RL.Minibatches > 0:
			eps := p.RL.GroupsPerStep * p.RL.GroupSize
			most = max(most, (eps+p.RL.Minibatches-1)/p.RL.Minibatches)
		}
	}
	prec := c.SamplingPrecision()
	return model.MemoryUse{
		Train: most > 0, TrainTokens: most * c.Rollout.MaxContext,
		CacheSlots: c.Rollout.EngineSlots, CacheLen: c.Rollout.MaxContext, CachePrecision: prec.KVCache,
		DecodeWeights: prec.Weights,
	}
}
