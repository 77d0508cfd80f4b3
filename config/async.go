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
	// Order is which finished groups the continuous learner takes for a step (continuous mode):
	// "finish" (the default) takes any finished group, the earliest admitted first, drops
	// episodes past the bound and cancels the groups in flight that can no longer train within
	// it — so the groups that are dropped or cancelled are the slow ones, and the learner trains
	// more often on tasks that finish fast; "bounded" takes finished groups in the same way but
	// never lets one miss its last step: a group admitted under version v must train by version
	// v + η, so the learner takes an earlier-admitted group first, or waits for it, whenever the
	// groups that must train by a version would no longer fit in the steps up to it. Every admitted
	// group then trains (or is dropped by dynamic sampling), nothing is stale or cancelled, and a
	// slow group delays the learner only when it reaches its last step. "admission" takes groups
	// strictly in the order they were admitted (the learner waits for the earliest one).
	Order string `yaml:"order"`
	// Stale is what the continuous learner does with an episode past the bound in finish order:
	// "drop" (the default) drops it and cancels the groups in flight that can no longer train
	// within η; "keep" trains every finished group whatever its lag and cancels nothing, so η
	// bounds admission only and a slow group trains later, with older tokens (the importance
	// correction weighs them). "keep" is for measuring what dropping the slow episodes costs; it
	// needs order "finish" (the other orders drop and cancel nothing).
	Stale string `yaml:"stale"`
	// AllowUncorrected lets the phase train without an importance correction against the
	// behaviour logprobs (rl.loss.correction.level empty: PPO's ratio is taken against the
	// learner's recomputed π_old only), to measure what the correction does. It is an error
	// together with a correction level.
	AllowUncorrected bool `yaml:"allow_uncorrected"`
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

// Continuous admission's orders (rl.async.order) and what it does with stale episodes
// (rl.async.stale).
const (
	OrderFinish    = "finish"
	OrderBounded   = "bounded"
	OrderAdmission = "admission"
	StaleDrop      = "drop"
	StaleKeep      = "keep"
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
	if a.Mode == ModeContinuous && a.Workers == nil {
		if a.Order == "" {
			a.Order = OrderFinish
		}
		if a.Stale == "" {
			a.Stale = StaleDrop
		}
	} else if a.Order != "" || a.Stale != "" {
		return fmt.Errorf("rl.async.order and rl.async.stale choose how continuous admission's learner takes groups (rl.async.mode: continuous, in-process)")
	}
	switch {
	case a.Order != "" && a.Order != OrderFinish && a.Order != OrderBounded && a.Order != OrderAdmission:
		return fmt.Errorf("rl.async.order must be %q, %q or %q, got %q", OrderFinish, OrderBounded, OrderAdmission, a.Order)
	case a.Stale != "" && a.Stale != StaleDrop && a.Stale != StaleKeep:
		return fmt.Errorf("rl.async.stale must be %q or %q, got %q", StaleDrop, StaleKeep, a.Stale)
	case a.Stale == StaleKeep && a.Order != OrderFinish:
		return fmt.Errorf("rl.async.stale: keep does nothing with order %q: it drops and cancels nothing", a.Order)
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
	if a.AllowUncorrected && r.Loss.Correction.Level != "" {
		return fmt.Errorf("rl.async.allow_uncorrected does nothing with rl.loss.correction.level %q", r.Loss.Correction.Level)
	}
	if r.Loss.Correction.Level == "" && !a.AllowUncorrected {
		return fmt.Errorf("rl.async trains on tokens sampled by older policies: it needs an importance correction against the behaviour logprobs (rl.loss.correction.level: token or sequence, decoupled PPO), not plain on-policy PPO; rl.async.allow_uncorrected: true to measure without one)")
	}
	if a.Workers != nil {
		return a.Workers.validate(r)
	}
	return nil
}
