package algo

import (
	"math"
	"slices"
)

// Metrics are named scalars with namespaced names: "adv/…" from estimators, "loss/…" from the
// policy term, "kl/…", "critic/…", "is/…" from importance corrections.
type Metrics map[string]float64

// quantiles writes the q-quantiles of x (linear interpolation between order statistics, as
// numpy.quantile does) into dst. It reorders x: callers pass a scratch copy. It runs in O(len(x))
// per quantile (quickselect), which keeps IS-weight quantiles cheap on 256k-token minibatches.
func quantiles(dst []float64, x []float64, qs []float64) {
	if len(x) == 0 {
		for i := range dst {
			dst[i] = math.NaN()
		}
		return
	}
	for i, q := range qs {
		pos := q * float64(len(x)-1)
		k := int(math.Floor(pos))
		lo := selectK(x, k)
		if frac := pos - float64(k); frac > 0 && k+1 < len(x) {
			// After selectK, x[k+1:] holds the larger elements; the next order statistic is their minimum.
			hi := slices.Min(x[k+1:])
			dst[i] = lo + frac*(hi-lo)
		} else {
			dst[i] = lo
		}
	}
}

// selectK partially orders x so that x[k] is the k-th smallest, smaller elements sit before it and
// larger ones after (Hoare's quickselect with a median-of-three pivot, deterministic).
func selectK(x []float64, k int) float64 {
	lo, hi := 0, len(x)-1
	for lo < hi {
		mid := lo + (hi-lo)/2
		if x[mid] < x[lo] {
			x[mid], x[lo] = x[lo], x[mid]
		}
		if x[hi] < x[lo] {
			x[hi], x[lo] = x[lo], x[hi]
		}
		if x[hi] < x[mid] {
			x[hi], x[mid] = x[mid], x[hi]
		}
		p := x[mid]
		i, j := lo, hi
		for i <= j {
			for x[i] < p {
				i++
			}
			for x[j] > p {
				j--
			}
			if i <= j {
				x[i], x[j] = x[j], x[i]
				i++
				j--
			}
		}
		switch {
		case k <= j:
			hi = j
		case k >= i:
			lo = i
		default:
			return x[k]
		}
	}
	return x[k]
}
