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
	sum := tempered(p, logits, s.Temperature)
	// Candidates in decreasing probability order are needed only for top-k / top-p.
	if !filters(s, n) {
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
	idx := byProbability(sp.idx[:n], p)
	keep, kept := nucleus(p, idx, sum, s)
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

// tempered fills p with the unnormalized probabilities exp(logit/T − max) of logits at
// temperature t > 0 and returns their sum.
func tempered(p []float64, logits []float32, t float32) float64 {
	inv := 1 / float64(t)
	maxL := math.Inf(-1)
	for _, l := range logits {
		// The logits are finite (emit checks), so a comparison is math.Max here but for the
		// sign of a zero maximum, which the shift below does not see.
		if v := float64(l) * inv; v > maxL {
			maxL = v
		}
	}
	var sum float64
	for i, l := range logits {
		p[i] = math.Exp(float64(l)*inv - maxL)
		sum += p[i]
	}
	return sum
}

// filters reports whether s's top-k or top-p cuts a distribution over n tokens.
func filters(s infer.Sampling, n int) bool {
	return (s.TopK > 0 && s.TopK < n) || (s.TopP > 0 && s.TopP < 1)
}

// byProbability fills idx with the token ids in decreasing order of p, ties by token id (a
// stable order, so a seed reproduces its draw), and returns it.
func byProbability(idx []int, p []float64) []int {
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool {
		if p[idx[a]] != p[idx[b]] {
			return p[idx[a]] > p[idx[b]]
		}
		return idx[a] < idx[b]
	})
	return idx
}

// nucleus is the set top-k and top-p keep of the tokens in order idx (by decreasing
// probability p, summing to sum): the first keep of them, whose probabilities sum to kept, the
// normalizer of the distribution sampled from.
func nucleus(p []float64, idx []int, sum float64, s infer.Sampling) (keep int, kept float64) {
	keep = len(idx)
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
	for _, i := range idx[:keep] {
		kept += p[i]
	}
	return keep, kept
}
