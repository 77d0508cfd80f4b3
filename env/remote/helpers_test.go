package remote

import (
	"math"
	"math/rand/v2"
	"reflect"

	"github.com/agentrl/agentrl/env"
)

func expertRand(seed int64) *rand.Rand { return rand.New(rand.NewPCG(uint64(seed), 3)) }

// equalEpisodes compares two episodes field by field, rewards by their bits.
func equalEpisodes(a, b env.Episode) bool {
	if a.Seed != b.Seed || a.Start != b.Start || a.Done != b.Done || a.Success != b.Success ||
		math.Float64bits(a.Reward) != math.Float64bits(b.Reward) || len(a.Steps) != len(b.Steps) {
		return false
	}
	for i := range a.Steps {
		x, y := a.Steps[i], b.Steps[i]
		if x.Action != y.Action || math.Float64bits(x.Transition.Reward) != math.Float64bits(y.Transition.Reward) {
			return false
		}
		x.Transition.Reward, y.Transition.Reward = 0, 0
		if !reflect.DeepEqual(x.Transition, y.Transition) {
			return false
		}
	}
	return true
}
