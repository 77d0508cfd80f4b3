package algo

import (
	"fmt"
	"math"
)

// Estimator computes advantages for a whole batch at once (all sequences, all groups). Estimate
// validates b, writes b.Advantages (one per token, 0 outside the loss mask and on infra-failed
// sequences) and, for critic estimators, b.Returns (value targets; nil otherwise), and returns
// metrics under "adv/".
type Estimator interface {
	Estimate(b *Batch) (Metrics, error)
}

// EstimatorFactory builds an Estimator from its config; it is the one signature of this extension
// point. A factory rejects settings of other estimators' sub-configs (they would do nothing).
type EstimatorFactory func(cfg AdvantageConfig) (Estimator, error)

// AdvantageConfig selects an estimator by Name and holds its parameters. Only the sub-config of the
// selected estimator may be non-zero. DefaultAdvantageConfig gives the paper defaults.
type AdvantageConfig struct {
	Name   string       `yaml:"name"`
	GRPO   GRPOConfig   `yaml:"grpo,omitzero"`   // "grpo", "rloo" has no parameters
	RPP    RPPConfig    `yaml:"rpp,omitzero"`    // "reinforce++", "reinforce++-baseline"
	GAE    GAEConfig    `yaml:"gae,omitzero"`    // "gae", "gae-turn"
	GiGPO  GiGPOConfig  `yaml:"gigpo,omitzero"`  // "gigpo"
	TurnRe TurnReConfig `yaml:"turnre,omitzero"` // "turn-return"
}

// GRPOConfig: group-normalised advantages (DeepSeekMath, arXiv 2402.03300).
type GRPOConfig struct {
	// NoStd drops the division by the group std (Dr. GRPO, arXiv 2503.20783 §3.2).
	NoStd bool `yaml:"no_std"`
}

// RPPConfig: REINFORCE++ (arXiv 2501.03262), token-level discounted returns whitened over the batch.
type RPPConfig struct {
	Gamma float64 `yaml:"gamma"` // discount over masked tokens, in (0, 1]
}

// GAEConfig: generalized advantage estimation (Schulman et al., arXiv 1506.02438).
type GAEConfig struct {
	Gamma  float64 `yaml:"gamma"`  // discount, in (0, 1]
	Lambda float64 `yaml:"lambda"` // bias/variance trade-off, in [0, 1]
	// NoWhiten keeps the raw GAE advantages. By default they are whitened over the batch's masked
	// tokens, as verl's compute_gae_advantage_return does (masked_whiten); the paper's estimator
	// itself is unnormalised, and cleanrl normalises per minibatch instead.
	NoWhiten bool `yaml:"no_whiten"`
}

// GiGPOConfig: group-in-group policy optimisation (arXiv 2505.10978).
type GiGPOConfig struct {
	Gamma      float64 `yaml:"gamma"`       // discount of step returns, in (0, 1] (paper: 0.95)
	StepWeight float64 `yaml:"step_weight"` // ω in A = A^E + ω·A^S, > 0 (paper: 1)
	NoStd      bool    `yaml:"no_std"`      // F_norm = 1 instead of the std, at both levels
}

// TurnReConfig: discounted per-turn return with the episode group as baseline.
type TurnReConfig struct {
	Gamma float64 `yaml:"gamma"` // discount between turns, in (0, 1]
	NoStd bool    `yaml:"no_std"`
}

// DefaultAdvantageConfig returns the named estimator's config with the defaults of its paper
// (or of verl where the paper leaves it open).
func DefaultAdvantageConfig(name string) (AdvantageConfig, error) {
	c := AdvantageConfig{Name: name}
	switch name {
	case "grpo", "rloo", "reinforce-baseline":
	case "reinforce++", "reinforce++-baseline":
		c.RPP = RPPConfig{Gamma: 1}
	case "gae", "gae-turn":
		c.GAE = GAEConfig{Gamma: 1, Lambda: 0.95}
	case "gigpo":
		c.GiGPO = GiGPOConfig{Gamma: 0.95, StepWeight: 1}
	case "turn-return":
		c.TurnRe = TurnReConfig{Gamma: 0.95}
	default:
		_, err := Estimators().Lookup(name)
		return c, err
	}
	return c, nil
}

// Validate checks the name against the built-in estimators and their parameters.
func (c AdvantageConfig) Validate() error {
	_, err := NewEstimator(c)
	return err
}

// NeedsValues reports whether e needs the rollout's value estimates (Batch.Values) from a critic:
// a policy without a value head cannot train with it.
func NeedsValues(e Estimator) bool {
	v, ok := e.(interface{ NeedsValues() bool })
	return ok && v.NeedsValues()
}

// Relative reports whether e baselines each episode against the other episodes of its group
// (Batch.Groups): a group of one has nothing to be compared with, so such an estimator needs
// groups of at least two episodes to give a learning signal.
func Relative(e Estimator) bool {
	v, ok := e.(interface{ GroupRelative() bool })
	return ok && v.GroupRelative()
}

// CreditsTurns reports whether e credits each assistant turn apart (from Batch.Turns) instead of
// the whole sequence: tokens outside the turns, such as tool responses in the loss
// (TrainOnToolTokens), then get no advantage.
func CreditsTurns(e Estimator) bool {
	v, ok := e.(interface{ CreditsTurns() bool })
	return ok && v.CreditsTurns()
}

// NewEstimator builds a built-in estimator.
func NewEstimator(c AdvantageConfig) (Estimator, error) { return Estimators().New(c) }

// Estimators returns a fresh registry holding the built-in advantage estimators.
func Estimators() *EstimatorRegistry {
	r := &EstimatorRegistry{newRegistry[EstimatorFactory]("advantage estimator")}
	for _, e := range []struct {
		name string
		f    EstimatorFactory
	}{
		{"grpo", newGRPO},
		{"rloo", newRLOO},
		{"reinforce-baseline", newReinforceBaseline},
		{"reinforce++", newRPP(false)},
		{"reinforce++-baseline", newRPP(true)},
		{"gae", newGAE(false)},
		{"gae-turn", newGAE(true)},
		{"gigpo", newGiGPO},
		{"turn-return", newTurnReturn},
	} {
		if err := r.Register(e.name, e.f); err != nil {
			panic(err) // the built-in table has a duplicate: a programming error
		}
	}
	return r
}

// EstimatorRegistry is the registry of advantage estimators.
type EstimatorRegistry struct{ *Registry[EstimatorFactory] }

// New builds the estimator named by c.Name.
func (r *EstimatorRegistry) New(c AdvantageConfig) (Estimator, error) {
	f, err := r.Lookup(c.Name)
	if err != nil {
		return nil, err
	}
	e, err := f(c)
	if err != nil {
		return nil, fmt.Errorf("algo: estimator %q: %w", c.Name, err)
	}
	return e, nil
}

// onlyUses rejects settings in sub-configs the selected estimator does not read.
func (c AdvantageConfig) onlyUses(sub string) error {
	set := map[string]bool{
		"grpo":   c.GRPO != GRPOConfig{},
		"rpp":    c.RPP != RPPConfig{},
		"gae":    c.GAE != GAEConfig{},
		"gigpo":  c.GiGPO != GiGPOConfig{},
		"turnre": c.TurnRe != TurnReConfig{},
	}
	for _, k := range []string{"grpo", "rpp", "gae", "gigpo", "turnre"} {
		if set[k] && k != sub {
			return fmt.Errorf("setting %s.* does nothing for estimator %q", k, c.Name)
		}
	}
	return nil
}

func checkGamma(what string, g float64) error {
	if !(g > 0 && g <= 1) {
		return fmt.Errorf("%s.gamma = %v, want 0 < gamma ≤ 1", what, g)
	}
	return nil
}

// prepare validates b and sizes its output slices.
func prepare(b *Batch, critic bool) error {
	if err := b.Validate(); err != nil {
		return err
	}
	n := b.NumTokens()
	b.Advantages = resize(b.Advantages, n)
	if critic {
		b.Returns = resize(b.Returns, n)
	} else {
		b.Returns = nil
	}
	return nil
}

func resize[T any](x []T, n int) []T {
	if cap(x) >= n {
		x = x[:n]
		clear(x)
		return x
	}
	return make([]T, n)
}

// advMetrics summarises the advantages of masked tokens of non-failed sequences, and counts groups.
func advMetrics(b *Batch, m Metrics) Metrics {
	if m == nil {
		m = Metrics{}
	}
	var n, sum, ss float64
	lo, hi := math.Inf(1), math.Inf(-1)
	failed := 0
	for i := 0; i < b.NumSeqs(); i++ {
		if b.failed(i) {
			failed++
			continue
		}
		l, h := b.Seq(i)
		for t := l; t < h; t++ {
			if b.Mask[t] {
				a := float64(b.Advantages[t])
				n++
				sum += a
				ss += a * a
				lo, hi = math.Min(lo, a), math.Max(hi, a)
			}
		}
	}
	m["adv/failed_seqs"] = float64(failed)
	if n > 0 {
		mean := sum / n
		m["adv/mean"], m["adv/std"] = mean, math.Sqrt(math.Max(ss/n-mean*mean, 0))
		m["adv/min"], m["adv/max"] = lo, hi
	}
	return m
}

// groupCounts records the degenerate-signal invariant: how many groups carry no learning signal.
func groupCounts(m Metrics, groups, zeroVar, singletons int) {
	m["adv/groups"] = float64(groups)
	m["adv/zero_var_groups"] = float64(zeroVar)
	m["adv/singleton_groups"] = float64(singletons)
	if groups > 0 {
		m["adv/zero_var_frac"] = float64(zeroVar) / float64(groups)
	}
}
