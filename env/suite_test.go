package env_test

import (
	"testing"
	"time"

	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/env/calc"
	"github.com/agentrl/agentrl/env/envtest"
)

// TestWrappedSuite runs the shared suite over calc with every wrapper stacked, so the wrappers
// keep determinism, the contract and goroutine hygiene, including the timeout's per-call
// goroutine.
func TestWrappedSuite(t *testing.T) {
	spec := calc.Spec()
	inner := spec.New
	spec.Name = "calc-wrapped"
	spec.Levels, spec.AtLevel = nil, nil // the levels would not be wrapped
	spec.New = func() (env.Env, error) {
		e, err := inner()
		if err != nil {
			return nil, err
		}
		return env.WithObservationCap(env.WithStepTimeout(env.WithTurnLimit(e, 3), time.Minute), 512), nil
	}
	envtest.Run(t, spec)
}
