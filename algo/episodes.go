package algo

import (
	"fmt"
	"math/rand/v2"
)

// An episode may be several training samples (traj.Trajectory.Samples): token sequences that each
// hold exactly what the policy saw when it sampled, and share the episode's outcome. In a Batch
// every sample is a sequence of its own, so that the learner packs and recomputes each one in its
// own context; Batch.Episodes says which episode each sequence belongs to. Advantages are
// estimated per episode (EstimateEpisodes: the estimator sees each episode's samples as one
// sequence, in order, and every sample gets its tokens' share), group statistics count
// episodes, minibatches keep an episode's samples together, and LossConfig.AggSamples says how
// samples weigh in the seq-mean aggregations.

// Aggregation of samples in the seq-mean modes (LossConfig.AggSamples).
const (
	// AggSamplesEpisode: an episode counts once in N, and seq-mean-token-mean averages over all
	// the masked tokens of its samples; an episode that was split into samples weighs what it
	// would have weighed unsplit. The default.
	AggSamplesEpisode = "episode"
	// AggSamplesSample: every sample counts as a sequence of its own in N.
	AggSamplesSample = "sample"
)

// NumEpisodes is the number of episodes: NumSeqs when Episodes is nil.
func (b *Batch) NumEpisodes() int {
	if b.Episodes == nil {
		return b.NumSeqs()
	}
	if len(b.Episodes) == 0 {
		return 0
	}
	return b.Episodes[len(b.Episodes)-1] + 1
}

// episodeSeqs returns, for each episode, the index of its first sequence, and a final entry
// NumSeqs.
func (b *Batch) episodeSeqs() []int {
	s := b.NumSeqs()
	if b.Episodes == nil {
		out := make([]int, s+1)
		for i := range out {
			out[i] = i
		}
		return out
	}
	out := make([]int, 0, b.NumEpisodes()+1)
	for i, e := range b.Episodes {
		if i == 0 || e != b.Episodes[i-1] {
			out = append(out, i)
		}
	}
	return append(out, s)
}

// validateEpisodes checks that Episodes numbers the sequences' episodes from 0 in order, each
// episode's samples contiguous, and that the samples of an episode share its outcome.
func (b *Batch) validateEpisodes() error {
	if b.Episodes == nil {
		return nil
	}
	if len(b.Episodes) != b.NumSeqs() {
		return fmt.Errorf("algo: episodes have %d entries, batch has %d sequences", len(b.Episodes), b.NumSeqs())
	}
	for i, e := range b.Episodes {
		prev := -1
		if i > 0 {
			prev = b.Episodes[i-1]
		}
		if e != prev && e != prev+1 {
			return fmt.Errorf("algo: %s is of episode %d after episode %d: want an episode's samples contiguous, numbered from 0", b.seqName(i), e, prev)
		}
		if e == prev {
			if b.Groups != nil && b.Groups[i] != b.Groups[i-1] || b.Status != nil && b.Status[i] != b.Status[i-1] ||
				b.Rewards != nil && b.Rewards[i] != b.Rewards[i-1] {
				return fmt.Errorf("algo: %s and the sample before it are of one episode but differ in group, status or reward", b.seqName(i))
			}
		}
	}
	return nil
}

// EpisodeView returns b with each episode's samples joined into one sequence: the per-token
// slices are b's own (an episode's samples are contiguous), the per-sequence fields are the
// episode's, and each sample's turns are moved to their place in the episode. With Episodes nil
// it returns b itself.
func (b *Batch) EpisodeView() *Batch {
	if b.Episodes == nil {
		return b
	}
	first := b.episodeSeqs()
	ne := len(first) - 1
	v := *b
	v.Episodes = nil
	v.Offsets = make([]int, ne+1)
	v.IDs, v.Groups, v.Status, v.Rewards = epSel(b.IDs, first), epSel(b.Groups, first), epSel(b.Status, first), epSel(b.Rewards, first)
	if b.TurnOffsets != nil {
		v.TurnOffsets = make([]int, 1, ne+1)
		v.Turns = make([]Turn, 0, len(b.Turns))
	}
	for e := range ne {
		lo, _ := b.Seq(first[e])
		v.Offsets[e] = lo
		if b.TurnOffsets == nil {
			continue
		}
		for i := first[e]; i < first[e+1]; i++ {
			s0, _ := b.Seq(i)
			for _, tu := range b.SeqTurns(i) {
				tu.Start += s0 - lo
				tu.End += s0 - lo
				v.Turns = append(v.Turns, tu)
			}
		}
		v.TurnOffsets = append(v.TurnOffsets, len(v.Turns))
	}
	v.Offsets[ne] = b.NumTokens()
	return &v
}

func epSel[T any](src []T, first []int) []T {
	if src == nil {
		return nil
	}
	out := make([]T, len(first)-1)
	for e := range out {
		out[e] = src[first[e]]
	}
	return out
}

// EstimateEpisodes runs e once over b's episodes (EpisodeView), so that an episode of several
// samples is credited as one episode: its group statistics count it once and its returns run
// through all of its turns in order. Every sample's tokens get the advantages (and returns)
// estimated for them. With one sample per episode it is e.Estimate(b).
func EstimateEpisodes(e Estimator, b *Batch) (Metrics, error) {
	if b.Episodes == nil {
		return e.Estimate(b)
	}
	if err := b.validateEpisodes(); err != nil {
		return nil, err
	}
	v := b.EpisodeView()
	m, err := e.Estimate(v)
	if err != nil {
		return nil, err
	}
	b.Advantages, b.Returns = v.Advantages, v.Returns
	return m, nil
}

// minibatchesOfEpisodes is Minibatches over episodes: episodes are shuffled and split, and each
// minibatch lists the sequences of its episodes in order.
func (b *Batch) minibatchesOfEpisodes(n int, rng *rand.Rand) ([][]int, error) {
	first := b.episodeSeqs()
	ne := len(first) - 1
	if n < 1 || n > ne {
		return nil, fmt.Errorf("algo: minibatches: want 1 ≤ n ≤ %d episodes, got n = %d", ne, n)
	}
	if rng == nil {
		return nil, fmt.Errorf("algo: minibatches: rng is nil (pass an explicitly seeded rand.Rand)")
	}
	perm := rng.Perm(ne)
	out := make([][]int, n)
	for k := range n {
		for _, e := range perm[k*ne/n : (k+1)*ne/n] {
			for i := first[e]; i < first[e+1]; i++ {
				out[k] = append(out[k], i)
			}
		}
	}
	return out, nil
}
