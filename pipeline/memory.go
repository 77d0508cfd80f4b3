package pipeline

import "github.com/agentrl/agentrl/model"

// checkMemory estimates the memory of the run's model cfg, says it, and refuses a run whose
// estimate exceeds the machine's memory.
func (r *Run) checkMemory(cfg model.Config) error {
	est := cfg.EstimateMemory(r.Cfg.MemoryUse())
	r.printf("memory estimate: %s\n", est)
	return est.CheckMemory(0)
}
