package algo

import (
	"fmt"
	"math"
)

// LossConfig selects the policy loss and every other term of the scalar loss
//
//	L = L_pg + KL.Coef·L_kl − EntropyCoef·L_entropy + Critic.Coef·L_value
//
// all aggregated by the same Agg mode. Only the selected policy's sub-config may be set; a setting
// that would do nothing is an error. DefaultLossConfig gives a working PPO configuration.
type LossConfig struct {
	Policy string      `yaml:"policy"` // "ppo", "gspo", "sapo", "cispo", "reinforce"
	PPO    PPOConfig   `yaml:"ppo,omitzero"`
	GSPO   GSPOConfig  `yaml:"gspo,omitzero"`
	SAPO   SAPOConfig  `yaml:"sapo,omitzero"`
	CISPO  CISPOConfig `yaml:"cispo,omitzero"`

	Agg     string  `yaml:"agg"`      // one of the Agg* modes
	AggNorm float64 `yaml:"agg_norm"` // the constant divisor L of seq-mean-token-sum-norm and dr-grpo (e.g. the max response length)
	// AggSamples is how the training samples of an episode (an episode split where the chat
	// template was not prefix-stable) count in the modes that average over sequences
	// (seq-mean-token-sum, seq-mean-token-mean, dr-grpo): AggSamplesEpisode ("episode", the
	// default when empty) counts each episode once in N and, under seq-mean-token-mean, averages
	// over all its samples' tokens; AggSamplesSample ("sample") counts each sample as a sequence.
	// The token modes need no such choice: under token-mean every token counts once, whichever
	// sample holds it. Setting it for another mode is an error (it would do nothing).
	AggSamples string `yaml:"agg_samples,omitempty"`

	KL          KLLossConfig     `yaml:"kl"`
	EntropyCoef float64          `yaml:"entropy_coef"` // ≥ 0; the bonus needs Current.Entropies
	Critic      CriticConfig     `yaml:"critic"`
	Correction  CorrectionConfig `yaml:"correction"`
}

// KLLossConfig adds β·KL(π_θ‖π_ref) to the loss (GRPO's in-loss KL, arXiv 2402.03300 eq. 3).
// Both zero = off. For the KL as a reward penalty see KLPenaltyConfig and ApplyKLPenalty.
type KLLossConfig struct {
	Estimator string  `yaml:"estimator"` // see KLEstimator; GRPO uses "k3"
	Coef      float64 `yaml:"coef"`      // β > 0
}

// CriticConfig adds PPO's value loss ½·max((V−R)², (clip(V, V_old ± ε) − R)²) (arXiv 1707.06347
// eq. 9; value clipping as in OpenAI baselines; verl's compute_value_loss), aggregated by the
// loss's Agg mode like every other term. V is the value the model computes now, V_old the value
// of the same token before the update (Batch.Values) and R the critic estimator's return
// (Batch.Returns). Coef 0 = off.
type CriticConfig struct {
	Coef float64 `yaml:"coef"` // c_v > 0
	Clip float64 `yaml:"clip"` // ε of value clipping around the rollout value; 0 = unclipped
}

// DefaultCriticConfig is the critic term a critic estimator gets by default: c_v = 0.5 (OpenAI
// baselines' vf_coef, cleanrl's) and ε = 0.5 (verl's critic.cliprange_value).
func DefaultCriticConfig() CriticConfig { return CriticConfig{Coef: 0.5, Clip: 0.5} }

// WithPolicy returns c with the paper defaults of the policy named name filled in and
// the other policies' sub-configs cleared.
func (c LossConfig) WithPolicy(name string) LossConfig {
	c.Policy = name
	c.PPO, c.GSPO, c.SAPO, c.CISPO = PPOConfig{}, GSPOConfig{}, SAPOConfig{}, CISPOConfig{}
	switch name {
	case "ppo":
		c.PPO = PPOConfig{ClipLow: 0.2, ClipHigh: 0.2}
	case "gspo":
		c.GSPO = GSPOConfig{ClipLow: 3e-4, ClipHigh: 4e-4}
	case "sapo":
		c.SAPO = SAPOConfig{TauPos: 1.0, TauNeg: 1.05}
	case "cispo":
		c.CISPO = CISPOConfig{ClipLow: 1, ClipHigh: 0.28}
	}
	return c
}

// DefaultLossConfig is PPO-clip (ε = 0.2) aggregated by token mean, with no KL, entropy, critic or
// correction term.
func DefaultLossConfig() LossConfig {
	return LossConfig{Agg: AggTokenMean}.WithPolicy("ppo")
}

// onlyUses rejects settings in sub-configs the selected policy loss does not read.
func (c LossConfig) onlyUses(sub string) error {
	set := map[string]bool{
		"ppo": c.PPO != PPOConfig{}, "gspo": c.GSPO != GSPOConfig{},
		"sapo": c.SAPO != SAPOConfig{}, "cispo": c.CISPO != CISPOConfig{},
	}
	for _, k := range []string{"ppo", "gspo", "sapo", "cispo"} {
		if set[k] && k != sub {
			return fmt.Errorf("setting %s.* does nothing for policy loss %q", k, c.Policy)
		}
	}
	return nil
}

// Validate checks every term of the config against the built-in policy losses.
func (c LossConfig) Validate() error {
	_, err := NewLoss(c)
	return err
}

// validateTerms checks everything but the policy loss itself.
func (c LossConfig) validateTerms() error {
	if err := oneOf("aggregation", c.Agg, aggModes); err != nil {
		return err
	}
	if aggNormed(c.Agg) {
		if !(c.AggNorm > 0) || math.IsInf(c.AggNorm, 0) {
			return fmt.Errorf("algo: %s needs a finite agg_norm > 0 (the constant divisor), have %v", c.Agg, c.AggNorm)
		}
	} else if c.AggNorm != 0 {
		return fmt.Errorf("algo: agg_norm does nothing with aggregation %q", c.Agg)
	}
	if c.AggSamples != "" {
		if err := oneOf("agg_samples", c.AggSamples, []string{AggSamplesEpisode, AggSamplesSample}); err != nil {
			return err
		}
		if !aggPerSeq(c.Agg) {
			return fmt.Errorf("algo: agg_samples does nothing with aggregation %q (every token counts once whatever its sample)", c.Agg)
		}
	}
	if c.KL != (KLLossConfig{}) {
		if _, err := ParseKL(c.KL.Estimator); err != nil {
			return err
		}
		if !(c.KL.Coef > 0) || math.IsInf(c.KL.Coef, 0) {
			return fmt.Errorf("algo: kl.coef = %v, want finite β > 0 (or leave kl empty)", c.KL.Coef)
		}
	}
	if !(c.EntropyCoef >= 0) || math.IsInf(c.EntropyCoef, 0) {
		return fmt.Errorf("algo: entropy_coef = %v, want finite ≥ 0", c.EntropyCoef)
	}
	if !(c.Critic.Coef >= 0) || math.IsInf(c.Critic.Coef, 0) || !(c.Critic.Clip >= 0) || math.IsInf(c.Critic.Clip, 0) {
		return fmt.Errorf("algo: critic coef %v / clip %v, want finite ≥ 0", c.Critic.Coef, c.Critic.Clip)
	}
	if c.Critic.Coef == 0 && c.Critic.Clip != 0 {
		return fmt.Errorf("algo: critic.clip does nothing with critic.coef = 0")
	}
	return c.Correction.validate()
}
