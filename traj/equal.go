package traj

import "math"

// Equal reports whether a and b hold the same trajectory bit for bit: floats are compared by
// their bit patterns (so NaN equals the same NaN and -0 differs from +0), and a nil slice equals
// an empty one. It is the equality the codecs promise to preserve.
func Equal(a, b *Trajectory) bool {
	if a.ID != b.ID || a.Env != b.Env || a.TaskSeed != b.TaskSeed || a.GroupID != b.GroupID ||
		math.Float64bits(a.Reward) != math.Float64bits(b.Reward) || a.Status != b.Status ||
		a.Error != b.Error || a.Timings != b.Timings {
		return false
	}
	if !equalSlices(a.Tokens, b.Tokens) || !equalSlices(a.Roles, b.Roles) ||
		!equalSlices(a.LossMask, b.LossMask) || !equalSlices(a.Versions, b.Versions) ||
		!equalSlices(a.Meta, b.Meta) || !equalSlices(a.Samples, b.Samples) {
		return false
	}
	if len(a.Logprobs) != len(b.Logprobs) {
		return false
	}
	for i := range a.Logprobs {
		if math.Float32bits(a.Logprobs[i]) != math.Float32bits(b.Logprobs[i]) {
			return false
		}
	}
	if len(a.Turns) != len(b.Turns) {
		return false
	}
	for i := range a.Turns {
		x, y := &a.Turns[i], &b.Turns[i]
		if x.Start != y.Start || x.End != y.End || x.ObsEnd != y.ObsEnd ||
			math.Float64bits(x.Reward) != math.Float64bits(y.Reward) || !equalSlices(x.ToolCalls, y.ToolCalls) {
			return false
		}
	}
	return true
}

func equalSlices[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
