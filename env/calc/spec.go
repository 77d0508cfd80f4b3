package calc

import (
	"fmt"

	"github.com/agentrl/agentrl/env"
)

// Seed ranges: training draws from the first billion seeds, held-out evaluation from the next
// million. Tasks are drawn independently per seed, so the ranges share no seed, though a short
// task can recur by chance (there are ~10^9 distinct tasks per operator count).
var (
	TrainSeeds   = env.SeedRange{Lo: 0, Hi: 1_000_000_000}
	HeldoutSeeds = env.SeedRange{Lo: 1_000_000_000, Hi: 1_001_000_000}
)

// Names of the two environments.
const (
	Name       = "calc"
	NameNoTool = "calc-notool"
)

// Spec describes the environment for an env.Registry.
func Spec() env.Spec { return variant{}.spec() }

// NoToolSpec describes calc-notool: the tasks of calc, with their seeds, and no calculator.
func NoToolSpec() env.Spec { return variant{noTool: true}.spec() }

func (v variant) spec() env.Spec {
	s := env.Spec{
		Name:        Name,
		Description: "multi-step arithmetic with an exact calculator tool; reward 1 for the exact answer",
		New:         v.new,
		Train:       TrainSeeds,
		Heldout:     HeldoutSeeds,
		Expert:      v.expert,
		Corpus:      v.corpus,
	}
	if v.noTool {
		s.Name, s.Description = NameNoTool, "the arithmetic of calc with no tool: the answer is written directly; reward 1 for the exact answer"
	}
	if v.level == 0 {
		s.Levels = Levels
		s.AtLevel = func(l int) env.Spec { return variant{level: l, noTool: v.noTool}.spec() }
	} else {
		s.Description += fmt.Sprintf(" (level %d: %d operators)", v.level, v.level)
	}
	return s
}
