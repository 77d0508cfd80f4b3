package config

import "fmt"

// AsyncConfig makes an RL phase asynchronous: generation of the next steps' episodes runs while
// the learner trains, under whatever weights are current (partial rollouts: an episode in flight
// continues under new weights, and every token records the version that sampled it).
type AsyncConfig struct {
	// MaxStaleness η bounds how many policy versions a trained token may lag the learner. It is
	// enforced where episodes start (generation runs at most η steps ahead of the learner) and where
	// the learner consumes them (an episode whose oldest policy token lags by more than η is
	// dropped and counted). 1 is one-step overlap.
	MaxStaleness int `yaml:"max_staleness"`
	// Mode is how generation is admitted: "continuous" (the default) starts one group whenever
	// the bound lets one start, so a slow episode holds back only its own group (continuous.go);
	// "overlap" samples whole steps' batches ahead of the learner, each still waiting for its
	// slowest episode (one-step overlap when η is 1).
	Mode string `yaml:"mode"`
	// PartialRollouts (the default, true) lets a completion in flight continue under new weights
	// from the next decode step on, each token recording its version. false switches weights only
	// between completions: the engine finishes the completions in flight, starting no new one,
	// then switches, so every completion is sampled by one version (episodes still span versions
	// at turn boundaries). In-process engine only.
	PartialRollouts *bool `yaml:"partial_rollouts"`
	// Workers, when set, runs the episodes on rollout workers through the NATS data plane
	// (distributed.go) instead of the in-process engine.
	Workers *WorkersConfig `yaml:"workers,omitempty"`
}

// maxStaleness is the largest accepted η; above WarnStaleness the run says the bound is loose.
const (
	maxStaleness  = 16
	WarnStaleness = 8
)

// Async admission modes.
const (
	ModeContinuous = "continuous"
	ModeOverlap    = "overlap"
)

// partial reports whether completions continue under new weights.
func (a *AsyncConfig) Partial() bool { return a.PartialRollouts == nil || *a.PartialRollouts }

func (a *AsyncConfig) validate(r *RLConfig, remoteGen bool) error {
	if a.MaxStaleness < 1 || a.MaxStaleness > maxStaleness {
		return fmt.Errorf("rl.async.max_staleness must be in [1, %d], got %d", maxStaleness, a.MaxStaleness)
	}
	if a.Mode == "" {
		a.Mode = ModeContinuous
	}
	if a.PartialRollouts == nil {
		t := true
		a.PartialRollouts = &t
	}
	switch {
	case a.Mode != ModeContinuous && a.Mode != ModeOverlap:
		return fmt.Errorf("rl.async.mode must be %q or %q, got %q", ModeContinuous, ModeOverlap, a.Mode)
	case !a.Partial() && remoteGen:
		return fmt.Errorf("rl.async.partial_rollouts: false switches the in-process engine's weights between completions; with rollout.generator the inference servers decide when weights switch")
	case !a.Partial() && a.Workers != nil:
		return fmt.Errorf("rl.async.partial_rollouts: false applies to the in-process engine, not to remote workers")
	case a.Workers != nil && a.Mode != ModeContinuous:
		return fmt.Errorf("rl.async.mode %q applies to in-process generation; remote workers are handed each step's tasks as the bound allows", a.Mode)
	}
	if r.Loss.Correction.Level == "" {
		return fmt.Errorf("rl.async trains on tokens sampled by older policies: it needs an importance correction against the behaviour logprobs (rl.loss.correction.level: token or sequence, decoupled PPO), not plain on-policy PPO")
	}
	if a.Workers != nil {
		return a.Workers.validate(r)
	}
	return nil
}
