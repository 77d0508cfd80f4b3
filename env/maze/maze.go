// Package maze is the "maze" environment: a grid maze generated from the seed (5–7 cells a side,
// loops added to a perfect maze, always solvable), where the agent sees only the four walls
// around its cell and the goal's offset, and moves with the words up, down, left and right.
// Reaching the goal ends the episode with reward 1; running out of the step budget
// (2·shortest path + 4) ends it with 0. An action without a move word is an "invalid move"
// observation that still costs a step, never an error.
//
// Positions recur within and across episodes, so the maze is the testbed for step-level credit
// assignment: every transition carries the true state (Info["state"], the cell) and the local view
// (Info["view"]). The package has no tools and no per-step shaping beyond an optional penalty;
// it does not model the agent's memory — the policy's context is its only map.
package maze

import (
	"fmt"
	"math/rand/v2"

	"github.com/agentrl/agentrl/env"
)

// Name is the registry name.
const Name = "maze"

// Seed ranges: disjoint; every seed is a different maze.
var (
	trainSeeds   = env.SeedRange{Lo: 0, Hi: 1 << 40}
	heldoutSeeds = env.SeedRange{Lo: 1 << 40, Hi: 1<<40 + 1<<20}
)

// Spec describes the environment for an env.Registry.
func Spec() env.Spec {
	s := specOf(DefaultConfig(), Corpus)
	s.Levels = Levels
	s.AtLevel = func(l int) env.Spec {
		cfg := LevelConfig(l)
		at := specOf(cfg, func(n int) []string { return corpusOf(cfg, n) })
		at.Description += fmt.Sprintf(" (level %d: %d-%d cells a side, goal %d-%d moves away)", l, cfg.MinSize, cfg.MaxSize, cfg.MinDist, cfg.MaxDist)
		return at
	}
	return s
}

func specOf(cfg Config, corpus func(n int) []string) env.Spec {
	return env.Spec{
		Name:        Name,
		Description: "reach the goal of a small grid maze seeing only the adjacent walls; moves up/down/left/right",
		New:         func() (env.Env, error) { return New(cfg) },
		Train:       trainSeeds,
		Heldout:     heldoutSeeds,
		Expert: func(seed int64, noise float64, rng *rand.Rand) env.Agent {
			return NewExpert(cfg, seed, noise, rng)
		},
		Corpus: corpus,
	}
}
