package algo

import (
	"fmt"
	"math"

	"github.com/agentrl/agentrl/traj"
)

// Batch is a set of sequences stored as flat per-token slices with offsets: sequence i owns the
// tokens [Offsets[i], Offsets[i+1]) of every per-token slice. Flat storage keeps each loop a
// straight pass over memory and makes a minibatch a copy of contiguous ranges (Select).
//
// Optional per-token slices are nil when absent; when present they have one entry per token.
type Batch struct {
	// Offsets has NumSeqs()+1 entries, starts at 0 and never decreases.
	Offsets []int

	// Per-token inputs.
	Tokens    []int32     // optional token ids; the learner needs them to recompute logprobs
	Mask      []bool      // loss mask: true for sampled policy tokens (the only ones with a gradient)
	Roles     []traj.Role // optional; when present Mask may be true only on assistant tokens (and tool tokens with ToolInLoss)
	Behaviour []float32   // logprobs under the distribution the sampler actually used
	// Old are the proximal logprobs π_old recomputed by the learner before the update. nil means
	// the ratio's denominator is Behaviour and no importance correction is possible.
	Old          []float32
	Ref          []float32 // reference-policy logprobs; needed only by KL terms
	Teacher      []float32 // a distillation teacher's logprobs of the policy's own tokens (DistillMask); 0 elsewhere
	Versions     []int32   // optional policy version per token (traj.NoVersion where not sampled)
	TokenRewards []float32 // optional dense per-token rewards (e.g. a KL penalty); only on masked tokens
	Values       []float32 // critic values V(s_t) at rollout time; needed by "gae", "gae-turn", clipped value loss

	// Per-token outputs of an Estimator, inputs of Loss.
	Advantages []float32
	Returns    []float32 // value targets; written only by critic estimators

	// Per-sequence inputs, one entry per sequence.
	IDs     []string      // optional names used in error messages
	Groups  []uint64      // group id: sequences sampled for the same task and initial state
	Status  []traj.Status // Failed() sequences are left out of statistics and of the loss
	Rewards []float64     // outcome reward

	// Turns of sequence i are Turns[TurnOffsets[i]:TurnOffsets[i+1]]. nil TurnOffsets means the
	// batch has no turn structure (turn-level estimators then refuse it).
	TurnOffsets []int
	Turns       []Turn

	// Episodes[i] is the episode of sequence i when an episode is several training samples
	// (traj.Trajectory.Samples): numbered from 0, an episode's samples contiguous and in order,
	// sharing its group, status and reward. nil means each sequence is an episode of its own.
	// See EstimateEpisodes.
	Episodes []int

	// ToolInLoss lets Mask cover tool-response tokens too (TrainOnToolTokens): the ablation of
	// Search-R1's retrieved-token masking, never the default.
	ToolInLoss bool
}

// Turn is one assistant action inside a sequence. Positions are relative to the sequence start.
type Turn struct {
	Start, End int     // the assistant completion, half-open
	Reward     float64 // per-turn (process) reward
	// Anchor is the anchor-state key that GiGPO groups steps by: turns of the same group with
	// equal anchors were taken from the same environment state (arXiv 2505.10978 §4.2).
	Anchor string
}

// NumSeqs is the number of sequences.
func (b *Batch) NumSeqs() int {
	if len(b.Offsets) == 0 {
		return 0
	}
	return len(b.Offsets) - 1
}

// NumTokens is the number of tokens over all sequences.
func (b *Batch) NumTokens() int {
	if len(b.Offsets) == 0 {
		return 0
	}
	return b.Offsets[len(b.Offsets)-1]
}

// Seq returns the token range [lo, hi) of sequence i.
func (b *Batch) Seq(i int) (lo, hi int) { return b.Offsets[i], b.Offsets[i+1] }

// SeqTurns returns the turns of sequence i (nil when the batch has no turn structure).
func (b *Batch) SeqTurns(i int) []Turn {
	if b.TurnOffsets == nil {
		return nil
	}
	return b.Turns[b.TurnOffsets[i]:b.TurnOffsets[i+1]]
}

// failed reports whether sequence i failed for infrastructure reasons.
func (b *Batch) failed(i int) bool { return b.Status != nil && b.Status[i].Failed() }

// seqName names sequence i in error messages.
func (b *Batch) seqName(i int) string {
	if b.IDs != nil && b.IDs[i] != "" {
		return fmt.Sprintf("sequence %d (%s)", i, b.IDs[i])
	}
	return fmt.Sprintf("sequence %d", i)
}

// Validate checks shapes and values: offsets, per-token and per-sequence lengths, turn ranges,
// finite numbers (an error names the sequence and token), masks only on assistant tokens (and
// tool-response tokens with ToolInLoss) and token rewards only on masked tokens.
func (b *Batch) Validate() error {
	if len(b.Offsets) == 0 {
		return fmt.Errorf("algo: batch has no offsets (want NumSeqs+1 entries starting at 0)")
	}
	if b.Offsets[0] != 0 {
		return fmt.Errorf("algo: batch offsets start at %d, want 0", b.Offsets[0])
	}
	for i := 1; i < len(b.Offsets); i++ {
		if b.Offsets[i] < b.Offsets[i-1] {
			return fmt.Errorf("algo: batch offsets decrease at sequence %d (%d < %d)", i-1, b.Offsets[i], b.Offsets[i-1])
		}
	}
	n, s := b.NumTokens(), b.NumSeqs()
	if len(b.Mask) != n {
		return fmt.Errorf("algo: mask has %d entries, batch has %d tokens", len(b.Mask), n)
	}
	if len(b.Behaviour) != n {
		return fmt.Errorf("algo: behaviour logprobs have %d entries, batch has %d tokens", len(b.Behaviour), n)
	}
	for _, c := range []struct {
		name string
		got  int
		nil_ bool
	}{
		{"tokens", len(b.Tokens), b.Tokens == nil},
		{"roles", len(b.Roles), b.Roles == nil},
		{"old logprobs", len(b.Old), b.Old == nil},
		{"reference logprobs", len(b.Ref), b.Ref == nil},
		{"teacher logprobs", len(b.Teacher), b.Teacher == nil},
		{"versions", len(b.Versions), b.Versions == nil},
		{"token rewards", len(b.TokenRewards), b.TokenRewards == nil},
		{"values", len(b.Values), b.Values == nil},
		{"advantages", len(b.Advantages), b.Advantages == nil},
		{"returns", len(b.Returns), b.Returns == nil},
	} {
		if !c.nil_ && c.got != n {
			return fmt.Errorf("algo: %s have %d entries, batch has %d tokens", c.name, c.got, n)
		}
	}
	for _, c := range []struct {
		name string
		got  int
		nil_ bool
	}{
		{"ids", len(b.IDs), b.IDs == nil},
		{"groups", len(b.Groups), b.Groups == nil},
		{"status", len(b.Status), b.Status == nil},
		{"rewards", len(b.Rewards), b.Rewards == nil},
	} {
		if !c.nil_ && c.got != s {
			return fmt.Errorf("algo: %s have %d entries, batch has %d sequences", c.name, c.got, s)
		}
	}
	if err := b.validateTurns(); err != nil {
		return err
	}
	if err := b.validateEpisodes(); err != nil {
		return err
	}
	for i := 0; i < s; i++ {
		if err := b.validateSeq(i); err != nil {
			return err
		}
	}
	return nil
}

func (b *Batch) validateTurns() error {
	if b.TurnOffsets == nil {
		if b.Turns != nil {
			return fmt.Errorf("algo: batch has turns but no turn offsets")
		}
		return nil
	}
	if len(b.TurnOffsets) != b.NumSeqs()+1 || b.TurnOffsets[0] != 0 || b.TurnOffsets[len(b.TurnOffsets)-1] != len(b.Turns) {
		return fmt.Errorf("algo: turn offsets must have NumSeqs+1 = %d entries from 0 to len(Turns) = %d", b.NumSeqs()+1, len(b.Turns))
	}
	for i := 0; i < b.NumSeqs(); i++ {
		if b.TurnOffsets[i+1] < b.TurnOffsets[i] {
			return fmt.Errorf("algo: turn offsets decrease at %s", b.seqName(i))
		}
		lo, hi := b.Seq(i)
		prev := 0
		for k, tu := range b.SeqTurns(i) {
			if tu.Start < prev || tu.End < tu.Start || tu.End > hi-lo {
				return fmt.Errorf("algo: %s turn %d: bad range [%d, %d) (previous end %d, length %d)", b.seqName(i), k, tu.Start, tu.End, prev, hi-lo)
			}
			if !finite(tu.Reward) {
				return fmt.Errorf("algo: %s turn %d: reward is %v", b.seqName(i), k, tu.Reward)
			}
			prev = tu.End
		}
	}
	return nil
}

func (b *Batch) validateSeq(i int) error {
	if b.Rewards != nil && !finite(b.Rewards[i]) {
		return fmt.Errorf("algo: %s: outcome reward is %v", b.seqName(i), b.Rewards[i])
	}
	if b.Status != nil && !b.Status[i].Valid() {
		return fmt.Errorf("algo: %s: unknown status %d", b.seqName(i), b.Status[i])
	}
	lo, hi := b.Seq(i)
	for t := lo; t < hi; t++ {
		if b.Roles != nil {
			if !b.Roles[t].Valid() {
				return fmt.Errorf("algo: %s token %d: unknown role %d", b.seqName(i), t-lo, b.Roles[t])
			}
			if b.Mask[t] && b.Roles[t] != traj.RoleAssistant && !(b.ToolInLoss && b.Roles[t] == traj.RoleTool) {
				return fmt.Errorf("algo: %s token %d: loss mask set on a %s token", b.seqName(i), t-lo, b.Roles[t])
			}
		}
		if b.TokenRewards != nil && !b.Mask[t] && b.TokenRewards[t] != 0 {
			return fmt.Errorf("algo: %s token %d: token reward %v on a token outside the loss mask", b.seqName(i), t-lo, b.TokenRewards[t])
		}
	}
	for _, c := range []struct {
		name string
		x    []float32
	}{
		{"behaviour logprob", b.Behaviour}, {"old logprob", b.Old}, {"reference logprob", b.Ref}, {"teacher logprob", b.Teacher},
		{"token reward", b.TokenRewards}, {"value", b.Values}, {"advantage", b.Advantages}, {"return", b.Returns},
	} {
		if t, ok := firstNonFinite(c.x, lo, hi); !ok {
			return fmt.Errorf("algo: %s token %d: %s is %v", b.seqName(i), t-lo, c.name, c.x[t])
		}
	}
	return nil
}

// firstNonFinite returns the first index in [lo, hi) of x holding NaN or ±Inf. A nil x is fine.
func firstNonFinite(x []float32, lo, hi int) (int, bool) {
	if x == nil {
		return 0, true
	}
	for t, v := range x[lo:hi] {
		if v-v != 0 { // NaN − NaN and Inf − Inf are NaN; every finite v gives 0
			return lo + t, false
		}
	}
	return 0, true
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
