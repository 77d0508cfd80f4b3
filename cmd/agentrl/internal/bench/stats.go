package bench

import "math"

// tQuantile975 is the 97.5% quantile of Student's t with df degrees of freedom (1.96 beyond 30).
func tQuantile975(df int) float64 {
	table := []float64{12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
		2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
		2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042}
	if df >= 1 && df <= len(table) {
		return table[df-1]
	}
	return 1.96
}

// ci95 is the mean of v and the half-width of its 95% interval (NaN for fewer than two values).
func ci95(v []float64) (mean, half float64) {
	mean, sd, ok := meanStd(v)
	if !ok {
		return math.NaN(), math.NaN()
	}
	if len(v) < 2 {
		return mean, math.NaN()
	}
	return mean, tQuantile975(len(v)-1) * sd / math.Sqrt(float64(len(v)))
}

// standardError is the standard error of the mean of v (0 for fewer than two values): of a
// held-out pass@1, from its tasks' own pass@1.
func standardError(v []float64) float64 {
	_, sd, ok := meanStd(v)
	if !ok || len(v) < 2 {
		return 0
	}
	return sd / math.Sqrt(float64(len(v)))
}
