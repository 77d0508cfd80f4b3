package calc

import "github.com/agentrl/agentrl/env"

// Seed ranges: training draws from the first billion seeds, held-out evaluation from the next
// million. Tasks are drawn independently per seed, so the ranges share no seed, though a short
// task can recur by chance (there are ~10^9 distinct tasks per operator count).
var (
	TrainSeeds   = env.SeedRange{Lo: 0, Hi: 1_000_000_000}
	HeldoutSeeds = env.SeedRange{Lo: 1_000_000_000, Hi: 1_001_000_000}
)

// Spec describes the environment for an env.Registry.
func Spec() env.Spec {
	return env.Spec{
		Name:        "calc",
		Description: "multi-step arithmetic with an exact calculator tool; reward 1 for the exact answer",
		New:         New,
		Train:       TrainSeeds,
		Heldout:     HeldoutSeeds,
		Expert:      Expert,
		Corpus:      Corpus,
	}
}
