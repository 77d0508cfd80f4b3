// Package search is the "search" environment: multi-hop questions over a synthetic knowledge base
// that the agent can only see through a BM25 search tool.
//
// The knowledge base (about 2,000 people, cities, countries, companies and universities with
// made-up pronounceable names, and the functional relations born in, works for, studied at,
// founded by, headquartered in, located in, country of and capital of) is generated from a fixed
// seed and rendered as one short document per entity, with one distractor fact each ("visited",
// "has an office in", "trades with"). Questions are WebShaper-style knowledge projections: chains
// of 1–3 relations from a named entity ("What is the country of the birthplace of the founder of
// Velora Corp?") and intersections of two relations over people ("Who was born in Miravo and works
// for Velora Corp?"), each with exactly one answer; the form and hop count are drawn from the seed.
// The agent answers with "Answer: <name>"; the reward is 1 for an exact match after normalization
// (case, punctuation, a leading article) and 0 otherwise.
//
// The knowledge base and its index are built once per process and shared read-only by every
// instance. The package does not judge partial answers, accept aliases, or change the knowledge
// base between tasks: held-out questions differ from train questions by their start entity (or
// answer, for intersections), not by a different world.
package search

import (
	"fmt"
	"math/rand/v2"

	"github.com/agentrl/agentrl/env"
)

// Name is the registry name.
const Name = "search"

// Seed ranges: disjoint; held-out seeds draw their questions from a reserved share of entities.
var (
	trainSeeds   = env.SeedRange{Lo: 0, Hi: 1 << 40}
	heldoutSeeds = env.SeedRange{Lo: 1 << 40, Hi: 1<<40 + 1<<20}
)

// Spec describes the environment for an env.Registry.
func Spec() env.Spec { return specAt(0) }

// specAt is the spec of the questions of level (0: the default mix, with its levels).
func specAt(level int) env.Spec {
	cfg := DefaultConfig()
	cfg.Level = level
	s := env.Spec{
		Name:        Name,
		Description: "answer 1-3 hop questions over a synthetic knowledge base with a BM25 search tool",
		New:         func() (env.Env, error) { return New(cfg) },
		Train:       trainSeeds,
		Heldout:     heldoutSeeds,
		Expert: func(seed int64, noise float64, rng *rand.Rand) env.Agent {
			return NewExpertAt(level, seed, noise, rng)
		},
		Corpus: func(n int) []string { return corpusAt(level, n) },
	}
	if level == 0 {
		s.Levels, s.AtLevel = Levels, specAt
	} else {
		s.Description += fmt.Sprintf(" (level %d: %d-hop chains)", level, level)
	}
	return s
}
