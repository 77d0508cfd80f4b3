package local

import (
	"math"
	"math/rand/v2"
	"sort"

	"github.com/agentrl/agentrl/infer"
)

// sampler draws tokens from logits with reusable scratch space. Not safe for concurrent use.
type sampler struct {
	probs []float64
	idx   []int
}

// sample draws one token from logits under s using rng, and returns it with its logprob under
// the distribution actually sampled from (after temperature, top-k and top-p renormalization).
// Greedy decoding (temperature 0) is a point mass: its logprob is 0.
func (sp *sampler) sample(logits []float32, s infer.Sampling, rng *rand.Rand) (int32, float32) {
	n := len(logits)
	if s.Temperature == 0 {
		best := 0
		for i, l := range logits {
			if l > logits[best] {
				best = i
			}
		}
		return int32(best), 0
	}
	if cap(sp.probs) < n {
		sp.probs = make([]float64, n)
		sp.idx = make([]int, n)
	}
	p := sp.probs[:n]
	inv := 1 / float64(s.Temperature)
	maxL := math.Inf(-1)
	for _, l := range logits {
		// The logits are finite (emit checks), so a comparison is math.Max here but for the
		// sign of a zero maximum, which the shift below does not see.
		if v := float64(l) * inv; v > maxL {
			maxL = v
		}
	}
	// Candidates in decreasing probability order are needed only for top-k / top-p.
	filter := (s.TopK > 0 && s.TopK < n) || (s.TopP > 0 && s.TopP < 1)
	var sum float64
	for i, l := range logits {
		p[i] = math.Exp(float64(l)*inv - maxL)
		sum += p[i]
	}
	if !filter {
		u := rng.Float64() * sum
		last := 0
		for i, pi := range p {
			if pi > 0 {
				last = i
			}
			u -= pi
			if u < 0 {
				return int32(i), float32(math.Log(pi / sum))
			}
		}
		return int32(last), float32(math.Log(p[last] / sum))
	}
	idx := sp.idx[:n]
	for i := range idx {
		idx[i] = i
	}
	// Stable order: by probability, ties by token id, so a seed reproduces its draw.
	sort.Slice(idx, func(a, b int) bool {
		if p[idx[a]] != p[idx[b]] {
			return p[idx[a]] > p[idx[b]]
		}
		return idx[a] < idx[b]
	})
	keep := n
	if s.TopK > 0 && s.TopK < keep {
		keep = s.TopK
	}
	if s.TopP > 0 && s.TopP < 1 {
		var cum float64
		for i := 0; i < keep; i++ {
			cum += p[idx[i]] / sum
			if cum >= float64(s.TopP) {
				keep = i + 1
				break
			}
		}
	}
	var kept float64
	for _, i := range idx[:keep] {
		kept += p[i]
	}
	u := rng.Float64() * kept
	for _, i := range idx[:keep] {
		u -= p[i]
		if u < 0 {
			return int32(i), float32(math.Log(p[i] / kept))
		}
	}
	last := idx[keep-1]
	return int32(last), float32(math.Log(p[last] / kept))
}
