package algo

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"

	"github.com/agentrl/agentrl/traj"
)

// FromTrajectories lays trajectories out as a Batch. It copies token ids, roles, loss mask, behaviour
// logprobs, versions, turns (with their per-turn rewards), outcome reward, group id and status,
// and uses each trajectory's ID in error messages. Each training sample of a trajectory
// (traj.Trajectory.Samples) is a sequence of its own, with the turns that lie in it; when any
// trajectory has several samples, Episodes maps the sequences back to their trajectories. Old, Ref, Values and TokenRewards stay nil: the
// learner fills them, aligned with the batch tokens (Seq gives each sequence's range).
//
// Each turn's Anchor defaults to the observation the turn acted on: the tokens between the end of
// the previous completion (or the start of the episode) and the start of this one. Identical
// observations then form GiGPO step groups. Environments whose observations alias different
// states should set Anchor to a real state key before estimating.
func FromTrajectories(ts []*traj.Trajectory) (*Batch, error) {
	n, nt, ns := 0, 0, 0
	for i, t := range ts {
		if t == nil {
			return nil, fmt.Errorf("algo: trajectory %d is nil", i)
		}
		if err := t.Validate(); err != nil {
			return nil, fmt.Errorf("algo: trajectory %d: %w", i, err)
		}
		n += t.Len()
		nt += len(t.Turns)
		ns += t.NumSamples()
	}
	if ns != len(ts) {
		return fromSamples(ts, n, nt, ns)
	}
	b := &Batch{
		Offsets:     make([]int, 1, len(ts)+1),
		Tokens:      make([]int32, 0, n),
		Mask:        make([]bool, 0, n),
		Roles:       make([]traj.Role, 0, n),
		Behaviour:   make([]float32, 0, n),
		Versions:    make([]int32, 0, n),
		IDs:         make([]string, len(ts)),
		Groups:      make([]uint64, len(ts)),
		Status:      make([]traj.Status, len(ts)),
		Rewards:     make([]float64, len(ts)),
		TurnOffsets: make([]int, 1, len(ts)+1),
		Turns:       make([]Turn, 0, nt),
	}
	for i, t := range ts {
		b.appendTokens(t)
		b.Offsets = append(b.Offsets, len(b.Mask))
		b.IDs[i], b.Groups[i], b.Status[i], b.Rewards[i] = t.ID, t.GroupID, t.Status, t.Reward
		prevEnd := 0
		for _, tu := range t.Turns {
			b.Turns = append(b.Turns, Turn{Start: tu.Start, End: tu.End, Reward: tu.Reward, Anchor: tokenKey(t.Tokens[prevEnd:tu.Start])})
			prevEnd = tu.End
		}
		b.TurnOffsets = append(b.TurnOffsets, len(b.Turns))
	}
	if err := b.Validate(); err != nil {
		return nil, err
	}
	return b, nil
}

// appendTokens appends t's tokens, loss mask, roles, behaviour logprobs and versions to b's.
func (b *Batch) appendTokens(t *traj.Trajectory) {
	b.Tokens = append(b.Tokens, t.Tokens...)
	b.Mask = append(b.Mask, t.LossMask...)
	b.Roles = append(b.Roles, t.Roles...)
	b.Behaviour = append(b.Behaviour, t.Logprobs...)
	b.Versions = append(b.Versions, t.Versions...)
}

// fromSamples is FromTrajectories for trajectories of which some have several samples: ns
// sequences of n tokens and nt turns in all.
func fromSamples(ts []*traj.Trajectory, n, nt, ns int) (*Batch, error) {
	b := &Batch{
		Offsets:     make([]int, 1, ns+1),
		Tokens:      make([]int32, 0, n),
		Mask:        make([]bool, 0, n),
		Roles:       make([]traj.Role, 0, n),
		Behaviour:   make([]float32, 0, n),
		Versions:    make([]int32, 0, n),
		IDs:         make([]string, 0, ns),
		Groups:      make([]uint64, 0, ns),
		Status:      make([]traj.Status, 0, ns),
		Rewards:     make([]float64, 0, ns),
		TurnOffsets: make([]int, 1, ns+1),
		Turns:       make([]Turn, 0, nt),
		Episodes:    make([]int, 0, ns),
	}
	for i, t := range ts {
		b.appendTokens(t)
		turns := t.Turns
		for k := range t.NumSamples() {
			lo, hi := t.Sample(k)
			b.Offsets = append(b.Offsets, b.Offsets[len(b.Offsets)-1]+hi-lo)
			id := t.ID
			if t.NumSamples() > 1 {
				id = fmt.Sprintf("%s sample %d", t.ID, k)
			}
			b.IDs = append(b.IDs, id)
			b.Groups, b.Status, b.Rewards = append(b.Groups, t.GroupID), append(b.Status, t.Status), append(b.Rewards, t.Reward)
			b.Episodes = append(b.Episodes, i)
			prevEnd := lo
			for len(turns) > 0 && turns[0].Start < hi {
				tu := turns[0]
				turns = turns[1:]
				b.Turns = append(b.Turns, Turn{Start: tu.Start - lo, End: tu.End - lo, Reward: tu.Reward, Anchor: tokenKey(t.Tokens[prevEnd:tu.Start])})
				prevEnd = tu.End
			}
			b.TurnOffsets = append(b.TurnOffsets, len(b.Turns))
		}
	}
	if err := b.Validate(); err != nil {
		return nil, err
	}
	return b, nil
}

// TrainOnToolTokens extends b's loss mask to its tool-response tokens (traj.RoleTool), so that the
// loss trains the policy to predict what the tools answered as if it had written it. This is the
// ablation of Search-R1's retrieved-token loss masking (arXiv 2503.09516 §3.1 and its Table 4,
// "w/o mask"), which found training on retrieved tokens less stable and worse; the default is to
// mask them, as nanochat's and verl's agent loops do. b must carry its roles. Call it before the
// proximal logprobs are recomputed, so that they cover these tokens too: nothing sampled them, so
// they have no behaviour logprob, and the learner takes the proximal one in its place (importance
// weight 1). An estimator that credits turns (CreditsTurns) would give them no advantage, and a
// critic estimator would give tokens the environment wrote a value: neither fits.
func (b *Batch) TrainOnToolTokens() error {
	if b.Roles == nil {
		return fmt.Errorf("algo: training on tool tokens needs the batch's roles")
	}
	for t, r := range b.Roles {
		if r == traj.RoleTool {
			b.Mask[t] = true
		}
	}
	b.ToolInLoss = true
	return nil
}

// tokenKey encodes token ids as a string usable as a map key (exact, no hashing collisions).
func tokenKey(ids []int32) string {
	buf := make([]byte, 4*len(ids))
	for i, id := range ids {
		binary.LittleEndian.PutUint32(buf[4*i:], uint32(id))
	}
	return string(buf)
}

// Select copies sequences idx (in that order) into a new compact Batch, with their advantages and
// returns, so a minibatch can be handed to Loss.Compute. Indexes out of range are an error.
func (b *Batch) Select(idx []int) (*Batch, error) {
	s := b.NumSeqs()
	n, nt := 0, 0
	for _, i := range idx {
		if i < 0 || i >= s {
			return nil, fmt.Errorf("algo: select: sequence index %d out of range [0, %d)", i, s)
		}
		n += b.Offsets[i+1] - b.Offsets[i]
		if b.TurnOffsets != nil {
			nt += b.TurnOffsets[i+1] - b.TurnOffsets[i]
		}
	}
	m := &Batch{Offsets: make([]int, 1, len(idx)+1), ToolInLoss: b.ToolInLoss}
	m.Mask = make([]bool, 0, n)
	m.Behaviour = make([]float32, 0, n)
	m.Tokens, m.Roles = selTok(m.Tokens, b.Tokens, n), selTok(m.Roles, b.Roles, n)
	m.Old, m.Ref = selTok(m.Old, b.Old, n), selTok(m.Ref, b.Ref, n)
	m.Teacher = selTok(m.Teacher, b.Teacher, n)
	m.Versions = selTok(m.Versions, b.Versions, n)
	m.TokenRewards, m.Values = selTok(m.TokenRewards, b.TokenRewards, n), selTok(m.Values, b.Values, n)
	m.Advantages, m.Returns = selTok(m.Advantages, b.Advantages, n), selTok(m.Returns, b.Returns, n)
	if b.TurnOffsets != nil {
		m.TurnOffsets = make([]int, 1, len(idx)+1)
		m.Turns = make([]Turn, 0, nt)
	}
	for _, i := range idx {
		lo, hi := b.Seq(i)
		m.Mask = append(m.Mask, b.Mask[lo:hi]...)
		m.Behaviour = append(m.Behaviour, b.Behaviour[lo:hi]...)
		m.Tokens, m.Roles = appendRange(m.Tokens, b.Tokens, lo, hi), appendRange(m.Roles, b.Roles, lo, hi)
		m.Old, m.Ref = appendRange(m.Old, b.Old, lo, hi), appendRange(m.Ref, b.Ref, lo, hi)
		m.Teacher = appendRange(m.Teacher, b.Teacher, lo, hi)
		m.Versions = appendRange(m.Versions, b.Versions, lo, hi)
		m.TokenRewards, m.Values = appendRange(m.TokenRewards, b.TokenRewards, lo, hi), appendRange(m.Values, b.Values, lo, hi)
		m.Advantages, m.Returns = appendRange(m.Advantages, b.Advantages, lo, hi), appendRange(m.Returns, b.Returns, lo, hi)
		m.Offsets = append(m.Offsets, len(m.Mask))
		if b.TurnOffsets != nil {
			m.Turns = append(m.Turns, b.SeqTurns(i)...)
			m.TurnOffsets = append(m.TurnOffsets, len(m.Turns))
		}
	}
	m.IDs, m.Groups = selSeq(b.IDs, idx), selSeq(b.Groups, idx)
	if b.Episodes != nil {
		// Renumber the episodes of the selection in its order.
		m.Episodes = make([]int, len(idx))
		for j, i := range idx {
			switch {
			case j == 0:
			case b.Episodes[i] == b.Episodes[idx[j-1]]:
				m.Episodes[j] = m.Episodes[j-1]
			default:
				m.Episodes[j] = m.Episodes[j-1] + 1
			}
		}
	}
	m.Status, m.Rewards = selSeq(b.Status, idx), selSeq(b.Rewards, idx)
	return m, nil
}

func selTok[T any](_ []T, src []T, n int) []T {
	if src == nil {
		return nil
	}
	return make([]T, 0, n)
}

func appendRange[T any](dst, src []T, lo, hi int) []T {
	if src == nil {
		return dst
	}
	return append(dst, src[lo:hi]...)
}

func selSeq[T any](src []T, idx []int) []T {
	if src == nil {
		return nil
	}
	out := make([]T, len(idx))
	for j, i := range idx {
		out[j] = src[i]
	}
	return out
}

// MinibatchUnits is the most minibatches b splits into: its sequences, or its episodes when an
// episode is several samples.
func (b *Batch) MinibatchUnits() int {
	if b.Episodes != nil {
		return len(b.episodeSeqs()) - 1
	}
	return b.NumSeqs()
}

// Minibatches shuffles the sequence indexes with rng and splits them into n minibatches whose
// sizes differ by at most one. Advantages are computed once per batch; the loss is computed per
// minibatch, so group structure does not need to survive the split. When an episode is several
// samples (Episodes), the episodes are shuffled and split instead, n at most their number, and
// each minibatch holds all the samples of its episodes.
func (b *Batch) Minibatches(n int, rng *rand.Rand) ([][]int, error) {
	if b.Episodes != nil {
		return b.minibatchesOfEpisodes(n, rng)
	}
	s := b.NumSeqs()
	if n < 1 || n > s {
		return nil, fmt.Errorf("algo: minibatches: want 1 ≤ n ≤ %d sequences, got n = %d", s, n)
	}
	if rng == nil {
		return nil, fmt.Errorf("algo: minibatches: rng is nil (pass an explicitly seeded rand.Rand)")
	}
	perm := rng.Perm(s)
	out := make([][]int, n)
	for k := range n {
		out[k] = perm[k*s/n : (k+1)*s/n]
	}
	return out, nil
}
