package pipeline

import (
	"fmt"

	"github.com/agentrl/agentrl/model"
)

// checkMemory estimates the memory of the run's model cfg, says it, and refuses a run whose
// estimate exceeds the machine's memory or the configured ceiling (limits.memory), naming the
// estimate's parts. It runs before the model is allocated.
func (r *Run) checkMemory(cfg model.Config) error {
	est := cfg.EstimateMemory(r.Cfg.MemoryUse())
	if l := r.Cfg.Limits; l != nil {
		r.printf("memory estimate: %s (limits.memory %s)\n", est, l.Memory)
	} else {
		r.printf("memory estimate: %s\n", est)
	}
	if err := est.CheckMemory(0); err != nil {
		return err
	}
	if l := r.Cfg.Limits; l != nil {
		if err := est.CheckMemory(int64(l.Memory)); err != nil {
			return fmt.Errorf("limits.memory: %w", err)
		}
	}
	return nil
}
