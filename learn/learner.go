// Package learn is the learner: it turns trajectories into weight updates of the built-in model.
// Supervised steps minimise cross entropy on assistant tokens; RL steps recompute the proximal
// ("old") and reference logprobs (and, for PPO with GAE, the value head's values), then run
// epochs of minibatches through an algo.Loss, pass d(loss)/d(logprob), d(loss)/d(entropy) and,
// with a critic term, d(loss)/d(value) to the model's backward, clip the global gradient norm and
// step AdamW. An update with a non-finite loss or gradient is skipped; one that leaves a
// weight non-finite is an error (ErrBrokenWeights), so broken weights are never trained on or
// published. It does not sample, step environments or decide what to train on: the
// pipeline hands it a batch.
package learn

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/agentrl/agentrl/algo"
	"github.com/agentrl/agentrl/model"
	"github.com/agentrl/agentrl/optim"
	"github.com/agentrl/agentrl/traj"
)

// Learner owns the trainable model and its optimizer.
type Learner struct {
	Model *model.Model
	Opt   *optim.AdamW
	// Sched gives the learning rate of each update of the current phase.
	Sched optim.Schedule
	// GradClip is the global gradient-norm bound (0 = no clipping).
	GradClip float32
	// RowLen is the packed row length; every sequence must fit in one row.
	RowLen int
	// Step is the phase step that the next updates belong to: it drives Sched, so the schedule
	// counts a phase's steps however many optimizer updates each takes (an RL step takes epochs ×
	// minibatches). SFTStep and RLStep advance it by one; a caller that skips a step, or resumes a
	// phase, sets it.
	Step int
	// Backend, when set, is the learner RL steps train through (the learner contract: an
	// external learner process); nil means the built-in model in-process, Model and Opt above.
	// Supervised steps always run in-process.
	Backend Backend
	// Context, when set, bounds the backend's calls (each call has its own deadline besides).
	Context context.Context

	own                *Builtin
	lp, ent, dlp, dent []float32
	val                []float32 // per-position values, with a critic
	out                algo.Output
}

// Config is how the learner updates the weights: the learning-rate schedule, AdamW and global
// gradient-norm clipping. It is a phase's `optim` block.
type Config struct {
	optim.ScheduleConfig `yaml:",inline"`
	optim.Config         `yaml:",inline"`
	// GradClip bounds the global gradient norm (0 = no clipping).
	GradClip float64 `yaml:"grad_clip"`
}

// DefaultEps is AdamW's ε where a configuration does not set eps (configurations written before
// eps was a setting).
const DefaultEps = 1e-8

// UnmarshalYAML reads the block with eps at DefaultEps unless it is given.
func (c *Config) UnmarshalYAML(unmarshal func(any) error) error {
	type plain Config
	p := plain{Config: optim.Config{Eps: DefaultEps}}
	if err := unmarshal(&p); err != nil {
		return err
	}
	*c = Config(p)
	return nil
}

// Validate reports a setting that cannot work, by its YAML name; it is the only check of them.
func (c Config) Validate() error {
	if err := c.ScheduleConfig.Validate(); err != nil {
		return err
	}
	if err := c.Config.Validate(); err != nil {
		return err
	}
	if !(c.GradClip >= 0) || math.IsInf(c.GradClip, 0) {
		return fmt.Errorf("grad_clip must be a finite number >= 0, got %v", c.GradClip)
	}
	return nil
}

// New makes a learner for a phase of steps steps with a fresh AdamW over m's parameters; rowLen
// is the packed row length, at most the model's max_seq.
func New(m *model.Model, c Config, steps, rowLen int) (*Learner, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	sched, err := c.Schedule(steps)
	if err != nil {
		return nil, err
	}
	if rowLen < 2 || rowLen > m.Cfg.MaxSeq {
		return nil, fmt.Errorf("learn: row length %d must be in [2, model max_seq %d]", rowLen, m.Cfg.MaxSeq)
	}
	params, _, tensors := m.Trainable() // the adapters alone when the model has them
	opt, err := optim.NewAdamW(c.Config, len(params), decaySegments(tensors))
	if err != nil {
		return nil, err
	}
	return &Learner{Model: m, Opt: opt, Sched: sched, GradClip: float32(c.GradClip), RowLen: rowLen}, nil
}

// Update is what one optimizer step reports.
type Update struct {
	GradNorm float64 // before clipping
	LR       float64
}

// ErrNonFinite is returned when the loss or the gradient is NaN or infinite; the update is
// skipped and the weights are left untouched.
var ErrNonFinite = errors.New("learn: non-finite loss or gradient, update skipped")

// ErrBrokenWeights is wrapped by the error of an update that left a weight NaN or infinite (a
// finite gradient times a learning rate that overflows). The weights are broken: the caller
// must stop, not train on or publish them.
var ErrBrokenWeights = errors.New("learn: the update made the weights non-finite")

// apply clips the accumulated gradient, steps AdamW at the current step's learning rate and
// clears the gradient.
func (l *Learner) apply() (Update, error) {
	return l.builtin().OptimStep(l.ctx(), OptimStep{LR: l.Sched.LR(l.Step), GradClip: l.GradClip, Step: l.Step})
}

// builtin is the in-process backend over l.Model and l.Opt, with l's row length.
func (l *Learner) builtin() *Builtin {
	if l.own == nil || l.own.Model != l.Model || l.own.Opt != l.Opt {
		l.own = &Builtin{Model: l.Model, Opt: l.Opt}
	}
	l.own.RowLen = l.RowLen
	return l.own
}

// backend is the learner RL steps go through: Backend, or the in-process one.
func (l *Learner) backend() Backend {
	if l.Backend != nil {
		return l.Backend
	}
	return l.builtin()
}

// ctx is the context of the backend's calls.
func (l *Learner) ctx() context.Context {
	if l.Context != nil {
		return l.Context
	}
	return context.Background()
}

// checkWeights names the first NaN or infinite weight of m: one read-only pass over the
// parameters, cheap beside the AdamW step that precedes it.
func checkWeights(m *model.Model) error {
	const exp = 0x7f800000 // all exponent bits set: ±Inf or NaN
	params, _, tensors := m.Trainable()
	for i, v := range params {
		if math.Float32bits(v)&exp != exp {
			continue
		}
		for _, t := range tensors {
			if i >= t.Offset && i < t.Offset+len(t.Data) {
				return fmt.Errorf("tensor %q index %d is %v", t.Name, i-t.Offset, v)
			}
		}
		return fmt.Errorf("weight %d is %v", i, v)
	}
	return nil
}

// finite reports whether x is neither NaN nor infinite.
func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// forward packs seqs (logprobs wanted where want is true; nil want means every token after the
// first) and runs m forward, leaving per-position logprobs and entropies in l.lp and l.ent, and
// with values the value head's estimates in l.val.
func (l *Learner) forward(m *model.Model, seqs [][]int32, want [][]bool, values bool) (*Packed, error) {
	p, err := Pack(seqs, want, l.RowLen)
	if err != nil {
		return nil, err
	}
	n := p.Batch.Rows * p.Batch.T
	l.lp, l.ent = grow(l.lp, n), grow(l.ent, n)
	if values {
		l.val = grow(l.val, n)
		err = m.ForwardValues(&p.Batch, l.lp, l.ent, l.val)
	} else {
		err = m.Forward(&p.Batch, l.lp, l.ent)
	}
	if err != nil {
		return nil, err
	}
	return p, nil
}

// gather copies sequence k's per-position values from vals into dst (its per-token range);
// dst[0] is 0, since nothing predicts a sequence's first token.
func gather(p *Packed, k int, dst, vals []float32) {
	p.Gather(dst, k, vals)
	if len(dst) > 0 {
		dst[0] = 0
	}
}

// SFTStats reports one supervised step.
type SFTStats struct {
	Loss    float64 // mean cross entropy over assistant tokens
	Tokens  int     // assistant tokens trained on
	Entropy float64 // mean predictive entropy at those tokens
	Update
}

// SFTStep takes one supervised step on the assistant tokens of trajs (cross entropy, mean over
// tokens). Trajectories without assistant tokens are skipped.
func (l *Learner) SFTStep(trajs []*traj.Trajectory) (SFTStats, error) {
	seqs := make([][]int32, 0, len(trajs))
	want := make([][]bool, 0, len(trajs))
	for _, t := range trajs {
		for k := range t.NumSamples() { // each training sample is a sequence of its own
			lo, hi := t.Sample(k)
			seqs, want = append(seqs, t.Tokens[lo:hi]), append(want, t.LossMask[lo:hi])
		}
	}
	p, err := l.forward(l.Model, seqs, want, false)
	if err != nil {
		return SFTStats{}, err
	}
	n := p.Batch.Rows * p.Batch.T
	var st SFTStats
	for _, tg := range p.Batch.Targets {
		if tg >= 0 {
			st.Tokens++
		}
	}
	if st.Tokens == 0 {
		return st, errors.New("learn: SFT batch has no assistant tokens")
	}
	l.dlp, l.dent = grow(l.dlp, n), grow(l.dent, n)
	clear(l.dlp)
	clear(l.dent)
	scale := -1 / float32(st.Tokens)
	var sum, ent float64
	for i, tg := range p.Batch.Targets {
		if tg >= 0 {
			sum -= float64(l.lp[i])
			ent += float64(l.ent[i])
			l.dlp[i] = scale
		}
	}
	st.Loss = sum / float64(st.Tokens)
	st.Entropy = ent / float64(st.Tokens)
	if !finite(st.Loss) {
		l.Step++
		return st, fmt.Errorf("%w (the loss is %v)", ErrNonFinite, st.Loss)
	}
	if err := l.Model.Backward(&p.Batch, l.dlp, l.dent); err != nil {
		return st, err
	}
	st.Update, err = l.apply()
	l.Step++
	return st, err
}

// Logprobs computes, under m, the logprob of every masked token of b (which must carry its
// tokens), laid out like b; other tokens get 0. It runs in chunks of chunk sequences to bound
// memory. With ent non-nil it also fills entropies.
func (l *Learner) Logprobs(m *model.Model, b *algo.Batch, chunk int, dst, ent []float32) error {
	return l.LogprobsValues(m, b, chunk, dst, ent, nil)
}

// LogprobsValues is Logprobs that, with val non-nil, also fills the value head's estimate V(s_t)
// of every masked token (the state the token was sampled in; 0 elsewhere), from the same forward
// passes. m must then have a value head. m is the learner's model or another one (a reference
// policy), always run in-process.
func (l *Learner) LogprobsValues(m *model.Model, b *algo.Batch, chunk int, dst, ent, val []float32) error {
	var bk Backend
	if m == l.Model && l.Backend == nil {
		bk = l.backend()
	} else {
		bk = &Builtin{Model: m, RowLen: l.RowLen}
	}
	return l.score(bk, b, chunk, ForwardOptions{}, dst, ent, val)
}

// score runs bk's Forward over b in chunks of chunk sequences, filling dst (logprobs) and, when
// non-nil, ent and val.
func (l *Learner) score(bk Backend, b *algo.Batch, chunk int, o ForwardOptions, dst, ent, val []float32) error {
	if b.Tokens == nil {
		return errors.New("learn: batch carries no token ids")
	}
	chunk = max(chunk, 1)
	o.Entropies, o.Values = ent != nil, val != nil
	s := b.NumSeqs()
	idx := make([]int, 0, chunk)
	for lo := 0; lo < s; lo += chunk {
		hi := min(lo+chunk, s)
		idx = idx[:0]
		for i := lo; i < hi; i++ {
			idx = append(idx, i)
		}
		seqs := seqsOf(b, b.Tokens, b.Mask, idx)
		t0, t1 := b.Offsets[lo], b.Offsets[hi]
		out := Outputs{Logprobs: dst[t0:t1]}
		if ent != nil {
			out.Entropies = ent[t0:t1]
		}
		if val != nil {
			out.Values = val[t0:t1]
		}
		if err := bk.Forward(l.ctx(), seqs, o, &out); err != nil {
			return err
		}
	}
	return nil
}

// RLStats reports one RL update (all epochs and minibatches).
type RLStats struct {
	Updates  int
	Loss     float64 // mean over minibatches
	GradNorm float64 // mean pre-clip norm over minibatches
	MaxGrad  float64
	LR       float64 // of the last update
	Skipped  int     // updates skipped for a non-finite loss or gradient
	Entropy  float64 // mean entropy of the masked assistant tokens in the first epoch
	Metrics  algo.Metrics
}

// RLStep runs epochs × minibatches updates of loss over b (carrying its tokens, advantages
// already estimated, Old and Ref filled when the loss uses them). rng shuffles the minibatches.
// version is the policy version being trained, for the version-lag metrics. A loss with a critic
// term (critic.coef > 0) reads the model's value head, which must exist, and trains it with the
// policy: its gradient reaches the trunk the policy shares.
//
// Each minibatch goes through the learner contract: Forward (logprobs, entropies, values), the
// loss and its per-token gradients here, ForwardBackward with those gradients, OptimStep.
func (l *Learner) RLStep(b *algo.Batch, loss *algo.Loss, epochs, minibatches int, rng *rand.Rand, version int32) (RLStats, error) {
	st := RLStats{Metrics: algo.Metrics{}}
	critic := loss.Config().Critic.Coef > 0
	if critic && l.Backend == nil && !l.Model.HasValueHead() {
		return st, errors.New("learn: the loss has a critic term (critic.coef > 0) but the model has no value head")
	}
	if b.Tokens == nil {
		return st, errors.New("learn: batch carries no token ids")
	}
	bk := l.backend()
	_, lpOnly := bk.(LogprobsOnly)
	ctx := l.ctx()
	var entSum float64
	var entN int
	// A step can hold fewer sequences than the configured minibatches (an asynchronous step whose
	// stale members were dropped): it then takes one minibatch per sequence (or episode).
	if u := b.MinibatchUnits(); u >= 1 && minibatches > u {
		minibatches = u
	}
	for ep := 0; ep < epochs; ep++ {
		mbs, err := b.Minibatches(minibatches, rng)
		if err != nil {
			return st, err
		}
		for _, idx := range mbs {
			mb, err := b.Select(idx)
			if err != nil {
				return st, err
			}
			seqs := seqsOf(b, b.Tokens, b.Mask, idx)
			nt := mb.NumTokens()
			cur := algo.Current{
				Logprobs:      make([]float32, nt),
				Entropies:     make([]float32, nt),
				PolicyVersion: version,
			}
			if critic {
				cur.Values = make([]float32, nt)
			}
			out := Outputs{Logprobs: cur.Logprobs, Entropies: cur.Entropies, Values: cur.Values}
			if lpOnly {
				out.Entropies = nil
			}
			if err := bk.Forward(ctx, seqs, ForwardOptions{Entropies: !lpOnly, Values: critic}, &out); err != nil {
				return st, err
			}
			if lpOnly { // the sampled tokens' surprisal estimates the entropy (LogprobsOnly)
				for j := range nt {
					if mb.Mask[j] {
						cur.Entropies[j] = -cur.Logprobs[j]
					}
				}
			}
			if ep == 0 {
				for j := range nt {
					// The policy's entropy: over its own tokens, also when tool tokens train.
					if mb.Mask[j] && (mb.Roles == nil || mb.Roles[j] == traj.RoleAssistant) {
						entSum += float64(cur.Entropies[j])
						entN++
					}
				}
			}
			if err := loss.Compute(&l.out, mb, cur); err != nil {
				return st, err
			}
			if !finite(l.out.Loss) {
				st.Skipped++ // as for a non-finite gradient: nothing is learned from it
				continue
			}
			c := Coefficients{DLogprobs: l.out.DLogprobs, DEntropies: l.out.DEntropies}
			if critic {
				c.DValues = l.out.DValues
			}
			if err := bk.ForwardBackward(ctx, seqs, c); err != nil {
				return st, err
			}
			up, err := bk.OptimStep(ctx, OptimStep{LR: l.Sched.LR(l.Step), GradClip: l.GradClip, Step: l.Step})
			if errors.Is(err, ErrNonFinite) {
				st.Skipped++
				continue
			}
			if err != nil {
				return st, err
			}
			st.Updates++
			st.Loss += l.out.Loss
			st.GradNorm += up.GradNorm
			st.MaxGrad = max(st.MaxGrad, up.GradNorm)
			st.LR = up.LR
			for k, v := range l.out.Metrics {
				st.Metrics[k] += v
			}
		}
	}
	l.Step++
	if st.Updates > 0 {
		st.Loss /= float64(st.Updates)
		st.GradNorm /= float64(st.Updates)
		for k := range st.Metrics {
			st.Metrics[k] /= float64(st.Updates)
		}
	}
	if entN > 0 {
		st.Entropy = entSum / float64(entN)
	}
	return st, nil
}

func grow(s []float32, n int) []float32 {
	if cap(s) < n {
		return make([]float32, n)
	}
	return s[:n]
}
