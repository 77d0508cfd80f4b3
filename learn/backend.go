package learn

import (
	"context"
	"errors"
	"fmt"
)

// Backend is the learner contract: whatever holds the trainable weights and the optimizer state.
// The RL math stays in Go (algo): an update is Forward → algo.Loss.Compute (the loss and its
// gradient with respect to each token's logprob, entropy and value) → ForwardBackward with those
// gradients as coefficients → OptimStep. It is exact for every loss, since the weights do not
// change between the Forward and the ForwardBackward: the gradient of Σ c_t·logπ(t) + Σ e_t·H(t)
// + Σ v_t·V(t) with c, e, v the loss's per-token derivatives is the loss's own gradient.
//
// Builtin is the in-process backend over the built-in model; HTTP speaks docs/learner.md to a
// learner process (the reference one is learners/torch). A backend is used by one goroutine.
type Backend interface {
	// Forward fills out with the logprob of every masked token of s under the current weights
	// (the frozen reference policy with o.Reference) and, when asked, its entropy and value; the
	// other tokens get 0.
	Forward(ctx context.Context, s *Seqs, o ForwardOptions, out *Outputs) error
	// ForwardBackward accumulates into the gradient the gradient of Σ_t c.DLogprobs[t]·logπ(t)
	// + c.DEntropies[t]·H(t) + c.DValues[t]·V(t) over the masked tokens of s (a nil slice is a
	// zero term).
	ForwardBackward(ctx context.Context, s *Seqs, c Coefficients) error
	// OptimStep clips the accumulated gradient's global norm, steps AdamW at o.LR and clears the
	// gradient. A non-finite gradient norm clears the gradient, leaves the weights alone and
	// returns ErrNonFinite; an update that leaves a weight non-finite returns ErrBrokenWeights.
	OptimStep(ctx context.Context, o OptimStep) (Update, error)
	// SaveForSampler makes the current weights available to the generating servers as version.
	SaveForSampler(ctx context.Context, version int32) (Artifact, error)
	// SaveState writes the weights and optimizer state where LoadState can read them back;
	// LoadState replaces the backend's weights and optimizer state with those.
	SaveState(ctx context.Context, dir string) error
	LoadState(ctx context.Context, dir string) error
}

// LogprobsOnly is implemented by a Backend whose Forward computes logprobs alone (learn/tinker:
// Tinker's forward returns nothing else). An RL step asks it for no entropies and measures the
// policy's entropy as the mean −logprob of the tokens trained on — the Monte Carlo estimate of
// the entropy, unbiased for tokens the current policy sampled; a loss with an entropy term
// cannot train through it (its configuration is refused).
type LogprobsOnly interface {
	Backend
	LogprobsOnly()
}

// Seqs is the batch of the contract: whole sequences, never split, laid out token by token as
// algo.Batch lays them out. Mask[t] says whether token t's logprob is wanted (and trained); a
// sequence's first token has none, whatever its mask says.
type Seqs struct {
	Tokens  []int32
	Offsets []int // sequence i is Tokens[Offsets[i]:Offsets[i+1]]; len = sequences + 1
	Mask    []bool
}

// NumSeqs is the number of sequences.
func (s *Seqs) NumSeqs() int { return max(len(s.Offsets)-1, 0) }

// Validate reports a malformed batch.
func (s *Seqs) Validate() error {
	if len(s.Offsets) < 2 {
		return errors.New("learn: batch has no sequences")
	}
	if s.Offsets[0] != 0 || s.Offsets[len(s.Offsets)-1] != len(s.Tokens) {
		return fmt.Errorf("learn: batch offsets span [%d, %d), tokens %d", s.Offsets[0], s.Offsets[len(s.Offsets)-1], len(s.Tokens))
	}
	for i := 1; i < len(s.Offsets); i++ {
		if s.Offsets[i] < s.Offsets[i-1] {
			return fmt.Errorf("learn: batch offset %d (%d) is below the one before it (%d)", i, s.Offsets[i], s.Offsets[i-1])
		}
	}
	if len(s.Mask) != len(s.Tokens) {
		return fmt.Errorf("learn: batch mask has %d entries for %d tokens", len(s.Mask), len(s.Tokens))
	}
	return nil
}

// ForwardOptions says what a Forward computes beside the logprobs.
type ForwardOptions struct {
	Entropies bool
	Values    bool // the value head's V(s_t) of every masked token; the model must have one
	// Reference scores with the frozen reference policy (the weights as the phase started)
	// instead of the weights being trained.
	Reference bool
}

// Outputs are per-token results laid out like the Seqs they answer; a slice is filled only when
// asked for and must then have one entry per token.
type Outputs struct {
	Logprobs, Entropies, Values []float32
}

// Coefficients are the loss's gradients with respect to each token's logprob, entropy and
// value (algo.Output's DLogprobs, DEntropies, DValues), laid out like the Seqs.
type Coefficients struct {
	DLogprobs, DEntropies, DValues []float32
}

// check validates c against s.
func (c Coefficients) check(s *Seqs) error {
	if c.DLogprobs == nil {
		return errors.New("learn: ForwardBackward needs d(loss)/d(logprob)")
	}
	for _, x := range []struct {
		name string
		v    []float32
	}{{"d(loss)/d(logprob)", c.DLogprobs}, {"d(loss)/d(entropy)", c.DEntropies}, {"d(loss)/d(value)", c.DValues}} {
		if x.v != nil && len(x.v) != len(s.Tokens) {
			return fmt.Errorf("learn: %s has %d entries for %d tokens", x.name, len(x.v), len(s.Tokens))
		}
	}
	return nil
}

// OptimStep is one optimizer update's schedule state.
type OptimStep struct {
	LR float32
	// GradClip bounds the gradient's global norm before the update (0 = no clipping).
	GradClip float32
	// Step is the phase step the update belongs to (the schedule's position, for the record);
	// AdamW's own update count is the backend's state.
	Step int
}

// Artifact is where a SaveForSampler put the weights of a policy version.
type Artifact struct {
	Version int32
	// Dir is a Hugging Face checkpoint folder (config.json, model.safetensors) holding the full
	// weights, or, for a learner training a LoRA adapter, the adapter in PEFT's format
	// (adapter_config.json, adapter_model.safetensors); empty for the in-process backend, whose
	// weights are the model itself.
	Dir string
	// URI names weights that stay on a remote learner (learn/tinker: a tinker:// path); empty
	// otherwise.
	URI string
}

// ErrLearner is wrapped by every error of a learner that failed or stopped answering (as
// opposed to a request it refused): the run stops with its last checkpoint.
var ErrLearner = errors.New("learn: the learner failed")

// seqsOf lays out sequences idx of b (all of them for nil idx) as a contract batch.
func seqsOf(b interface {
	Seq(int) (int, int)
	NumSeqs() int
}, tokens []int32, mask []bool, idx []int) *Seqs {
	if idx == nil {
		idx = make([]int, b.NumSeqs())
		for i := range idx {
			idx[i] = i
		}
	}
	s := &Seqs{Offsets: make([]int, 1, len(idx)+1)}
	for _, i := range idx {
		lo, hi := b.Seq(i)
		s.Tokens = append(s.Tokens, tokens[lo:hi]...)
		s.Mask = append(s.Mask, mask[lo:hi]...)
		s.Offsets = append(s.Offsets, len(s.Tokens))
	}
	return s
}
