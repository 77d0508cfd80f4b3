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

// aggPerSeq reports whether mode divides by N, the number of sequences (or episodes) that count.
func aggPerSeq(mode string) bool {
	return mode == AggSeqMeanTokenSum || mode == AggSeqMeanTokenMean || mode == AggDrGRPO
}

// aggNormed reports whether mode divides by the constant L (LossConfig.AggNorm).
func aggNormed(mode string) bool { return mode == AggSeqMeanTokenSumNm || mode == AggDrGRPO }

// aggregate is the one place where the loss mask becomes a normalisation. It writes coef[i], the
// weight of every masked token of sequence i in the scalar loss, so that loss = Σ_i coef[i]·Σ_t m·ℓ_t
// for every term (policy gradient, KL, entropy, value) alike. Sequences not included (infra-failed,
// rejected) get 0 and do not count in any denominator; N counts included sequences with at least
// one masked token. It returns the number of masked tokens and of sequences that count.
//
// When a sequence is one sample of an episode (b.Episodes) and samples is AggSamplesEpisode (or
// ""), N counts episodes and seq-mean-token-mean's per-sequence token count is the episode's:
// all the samples of an episode weigh together what one sequence weighs.
func aggregate(coef []float64, b *Batch, include []bool, mode string, norm float64, samples string) (tokens, seqs int) {
	if b.Episodes != nil && samples != AggSamplesSample {
		return aggregateEpisodes(coef, b, include, mode, norm)
	}
	for i := range coef {
		coef[i] = 0
		if !include[i] {
			continue
		}
		if n := b.maskedTokens(i); n > 0 {
			tokens += n
			seqs++
			coef[i] = float64(n) // the masked-token count, turned into a coefficient below
		}
	}
	for i, n := range coef {
		if n != 0 {
			coef[i] = aggCoef(mode, tokens, seqs, n, norm)
		}
	}
	return tokens, seqs
}

// aggregateEpisodes is aggregate with each episode of b (its samples, b.Episodes) in place of a
// sequence; seqs is then the number of episodes that count.
func aggregateEpisodes(coef []float64, b *Batch, include []bool, mode string, norm float64) (tokens, seqs int) {
	first := b.episodeSeqs()
	perEp := make([]int, len(first)-1)
	for e := range perEp {
		for i := first[e]; i < first[e+1]; i++ {
			coef[i] = 0
			if !include[i] {
				continue
			}
			n := b.maskedTokens(i)
			coef[i] = float64(n)
			perEp[e] += n
		}
		if perEp[e] > 0 {
			tokens += perEp[e]
			seqs++
		}
	}
	for e, ne := range perEp {
		for i := first[e]; i < first[e+1]; i++ {
			if coef[i] != 0 {
				coef[i] = aggCoef(mode, tokens, seqs, float64(ne), norm)
			}
		}
	}
	return tokens, seqs
}

// maskedTokens is the number of masked tokens of sequence i.
func (b *Batch) maskedTokens(i int) int {
	lo, hi := b.Seq(i)
	n := 0
	for t := lo; t < hi; t++ {
		if b.Mask[t] {
			n++
		}
	}
	return n
}

// aggCoef is the weight under mode of each masked token of a sequence that counts, n being its
// masked-token count (its episode's, when episodes stand in for sequences), of tokens masked
// tokens and seqs sequences that count in all. mode is one of aggModes (NewLoss checks).
func aggCoef(mode string, tokens, seqs int, n, norm float64) float64 {
	switch mode {
	case AggTokenMean:
		return 1 / float64(tokens)
	case AggTokenSum:
		return 1
	case AggSeqMeanTokenSum:
		return 1 / float64(seqs)
	case AggSeqMeanTokenMean:
		return 1 / (float64(seqs) * n)
	case AggSeqMeanTokenSumNm:
		return 1 / norm
	case AggDrGRPO:
		return 1 / (float64(seqs) * norm)
	}
	return n
}
