package algo

// Aggregation modes: how per-token losses become one scalar (verl's agg_loss, whose names and
// numbers the first five keep; L is the constant LossConfig.AggNorm).
//
// seq-mean-token-sum-norm is verl's definition, Σ_i Σ_t m·ℓ / L with no 1/N despite its name, so
// its scale grows with the minibatch. Dr. GRPO as published (arXiv 2503.20783, its listing:
// masked sum over MAX_TOKENS, then the mean over responses) divides by N·L as well; that is
// "dr-grpo", under a name of its own so that no number differs from verl's under verl's name.
const (
	AggTokenMean         = "token-mean"              // Σ_i Σ_t m·ℓ / Σ_i Σ_t m (DAPO)
	AggTokenSum          = "token-sum"               // Σ_i Σ_t m·ℓ
	AggSeqMeanTokenSum   = "seq-mean-token-sum"      // (1/N) Σ_i Σ_t m·ℓ
	AggSeqMeanTokenMean  = "seq-mean-token-mean"     // (1/N) Σ_i (Σ_t m·ℓ / Σ_t m) (GRPO as published)
	AggSeqMeanTokenSumNm = "seq-mean-token-sum-norm" // Σ_i Σ_t m·ℓ / L (verl; no 1/N)
	AggDrGRPO            = "dr-grpo"                 // (1/N) Σ_i Σ_t m·ℓ / L (Dr. GRPO as published)
)

var aggModes = []string{AggTokenMean, AggTokenSum, AggSeqMeanTokenSum, AggSeqMeanTokenMean, AggSeqMeanTokenSumNm, AggDrGRPO}

// aggNormed reports whether mode divides by the constant L (LossConfig.AggNorm).
func aggNormed(mode string) bool { return mode == AggSeqMeanTokenSumNm || mode == AggDrGRPO }

// aggregate is the one place where the loss mask becomes a normalisation. It writes coef[i], the
// weight of every masked token of sequence i in the scalar loss, so that loss = Σ_i coef[i]·Σ_t m·ℓ_t
// for every term (policy gradient, KL, entropy, value) alike. Sequences not included (infra-failed,
// rejected) get 0 and do not count in any denominator; N counts included sequences with at least
// one masked token. It returns the number of masked tokens and of sequences that count.
func aggregate(coef []float64, b *Batch, include []bool, mode string, norm float64) (tokens, seqs int) {
	for i := range coef {
		coef[i] = 0
		if !include[i] {
			continue
		}
		lo, hi := b.Seq(i)
		n := 0
		for t := lo; t < hi; t++ {
			if b.Mask[t] {
				n++
			}
		}
		if n > 0 {
			tokens += n
			seqs++
			coef[i] = float64(n) // the masked-token count, turned into a coefficient below
		}
	}
	for i, n := range coef {
		if n == 0 {
			continue
		}
		switch mode {
		case AggTokenMean:
			coef[i] = 1 / float64(tokens)
		case AggTokenSum:
			coef[i] = 1
		case AggSeqMeanTokenSum:
			coef[i] = 1 / float64(seqs)
		case AggSeqMeanTokenMean:
			coef[i] = 1 / (float64(seqs) * n)
		case AggSeqMeanTokenSumNm:
			coef[i] = 1 / norm
		case AggDrGRPO:
			coef[i] = 1 / (float64(seqs) * norm)
		}
	}
	return tokens, seqs
}
