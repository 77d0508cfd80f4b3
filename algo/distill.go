package algo

import (
	"fmt"
	"math"

	"github.com/agentrl/agentrl/traj"
)

// On-policy distillation: the student samples, a teacher scores every sampled token, and the
// per-token reverse KL to the teacher, KL(π_θ‖π_T) estimated at the sampled token, is the
// learning signal (Agarwal et al., "On-Policy Distillation of Language Models", arXiv
// 2306.13649; Gu et al., MiniLLM, arXiv 2306.08543). Batch.Teacher holds the teacher's logprobs of
// the DistillMask tokens. Two ways to train on it, both named:
//
//	advantage  A_t += −coef·(logπ_old(t) − logπ_T(t)) after the advantages are estimated: the
//	           reverse KL as a per-token reward that is not discounted or normalized, as the Tinker
//	           cookbook's on-policy distillation (tinker_cookbook/distillation, incorporate_kl_penalty)
//	           and prime-rl add it; the policy loss (PPO-clip, …) then trains on it.
//	loss       coef·Σ KL_est(π_θ(t)‖π_T(t)) as a loss term beside the policy loss, with one of
//	           KLEstimator's estimators (k1: logπ_θ − logπ_T, whose gradient at the sampled token is
//	           the REINFORCE-free pathwise term; k3: Schulman's low-variance estimator, as GRPO's
//	           in-loss KL uses it against a reference).
const (
	DistillAdvantage = "advantage"
	DistillLoss      = "loss"
)

// DistillModes are the valid modes, for error messages.
var DistillModes = []string{DistillAdvantage, DistillLoss}

// DistillLossEstimators are the KL estimators mode loss takes: those whose gradient at the sampled
// token moves logπ_θ toward logπ_T (k2, k3, and k1 and k3 with k2's gradient). k1 and abs are
// refused: k1's gradient is 1 at every token (it lowers every sampled token's logprob whatever
// the teacher says) and abs's only its sign.
var DistillLossEstimators = []string{"k2", "k3", "k1+", "k3+", "k2+"}

// DistillMask reports whether token t of b is one the teacher judges: in the loss mask and
// sampled by the policy. A tool's or environment's token never is, even with ToolInLoss.
func (b *Batch) DistillMask(t int) bool {
	return b.Mask[t] && (b.Roles == nil || b.Roles[t] == traj.RoleAssistant)
}

// DistillKL measures the per-token reverse KL to the teacher of the policy that sampled (Old when
// the learner recomputed it, else Behaviour): "distill/kl_mean" (k1, the sampled-token estimate
// of KL(π‖π_T)), "distill/kl_k3_mean" and "distill/tokens", over the DistillMask tokens of
// non-failed sequences; and how much the signal can say: "distill/kl_abs_max", the largest
// |logπ − logπ_T| of a token (0 when the teacher judges as the student does), and
// "distill/teacher_lp_range", the teacher's largest logprob less its smallest (0 when it gives
// every token the same).
func DistillKL(b *Batch) (Metrics, error) {
	if b.Teacher == nil {
		return nil, fmt.Errorf("algo: distillation needs teacher logprobs (Batch.Teacher)")
	}
	logp := b.Old
	if logp == nil {
		logp = b.Behaviour
	}
	k3, _ := ParseKL("k3")
	var k1s, k3s, absMax float64
	tLo, tHi := math.Inf(1), math.Inf(-1)
	n := 0
	for i := 0; i < b.NumSeqs(); i++ {
		if b.failed(i) {
			continue
		}
		lo, hi := b.Seq(i)
		for t := lo; t < hi; t++ {
			if b.DistillMask(t) {
				lt := float64(b.Teacher[t])
				d := float64(logp[t]) - lt
				k1s += d
				absMax = max(absMax, math.Abs(d))
				tLo, tHi = min(tLo, lt), max(tHi, lt)
				v, _ := k3.Eval(float64(logp[t]), lt)
				k3s += v
				n++
			}
		}
	}
	m := Metrics{"distill/tokens": float64(n)}
	if n > 0 {
		m["distill/kl_mean"] = k1s / float64(n)
		m["distill/kl_k3_mean"] = k3s / float64(n)
		m["distill/kl_abs_max"] = absMax
		m["distill/teacher_lp_range"] = tHi - tLo
	}
	return m, nil
}

// ApplyDistillAdvantage adds −coef·(logπ_old − logπ_T) to the advantage of every DistillMask
// token of non-failed sequences (mode "advantage"); with only, the estimated advantages of the
// loss-mask tokens are first set to zero, so the teacher's judgement is the whole signal (a
// distill phase). Call it after the estimator. It reports DistillKL's metrics and
// "distill/adv_share": Σ|distillation term| / (Σ|distillation term| + Σ|estimated advantage|)
// over those tokens, the teacher's share of the signal.
func ApplyDistillAdvantage(b *Batch, coef float64, only bool) (Metrics, error) {
	if !(coef > 0) || math.IsInf(coef, 0) {
		return nil, fmt.Errorf("algo: distillation coefficient %v, want finite > 0", coef)
	}
	if err := b.Validate(); err != nil {
		return nil, err
	}
	if b.Advantages == nil {
		return nil, fmt.Errorf("algo: distillation into the advantage needs the advantages (run the estimator first)")
	}
	m, err := DistillKL(b)
	if err != nil {
		return nil, err
	}
	logp := b.Old
	if logp == nil {
		logp = b.Behaviour
	}
	var dist, env float64
	for i := 0; i < b.NumSeqs(); i++ {
		lo, hi := b.Seq(i)
		if b.failed(i) {
			continue
		}
		for t := lo; t < hi; t++ {
			if only && b.Mask[t] {
				b.Advantages[t] = 0
			}
			if !b.DistillMask(t) {
				continue
			}
			d := -coef * (float64(logp[t]) - float64(b.Teacher[t]))
			env += math.Abs(float64(b.Advantages[t]))
			dist += math.Abs(d)
			b.Advantages[t] += float32(d)
		}
	}
	if dist+env > 0 {
		m["distill/adv_share"] = dist / (dist + env)
	}
	m["distill/coef"] = coef
	return m, nil
}

// ZeroAdvantages sets the advantage of every loss-mask token to zero: a distill phase in mode
// "loss" trains on the distillation term alone.
func ZeroAdvantages(b *Batch) {
	for t := range b.Advantages {
		if b.Mask[t] {
			b.Advantages[t] = 0
		}
	}
}

// distillTerm is mode "loss": coef·Σ seqcoef·KL_est(π_θ‖π_T) over the DistillMask tokens.
type distillTerm struct {
	coef float64
	est  KLEstimator
}

// WithDistill returns a copy of l with the distillation loss term coef·KL_est(π_θ‖π_T) over the
// teacher-judged tokens (mode "loss"), aggregated as the policy loss is; its minibatches must
// carry Batch.Teacher.
func (l *Loss) WithDistill(coef float64, est KLEstimator) (*Loss, error) {
	if !(coef > 0) || math.IsInf(coef, 0) {
		return nil, fmt.Errorf("algo: distillation coefficient %v, want finite > 0", coef)
	}
	if est.name == "" {
		return nil, fmt.Errorf("algo: distillation: no estimator (use ParseKL)")
	}
	c := *l
	c.distill = &distillTerm{coef: coef, est: est}
	return &c, nil
}

func (l *Loss) distillTerm(out *Output, mb *Batch, cur Current, m Metrics) float64 {
	d := l.distill
	if d == nil {
		return 0 // check refused a distillation term without Batch.Teacher
	}
	var sum, mean, n float64
	for i := 0; i < mb.NumSeqs(); i++ {
		c := out.coef[i]
		if c == 0 {
			continue
		}
		lo, hi := mb.Seq(i)
		for t := lo; t < hi; t++ {
			if !mb.DistillMask(t) {
				continue
			}
			v, g := d.est.Eval(float64(cur.Logprobs[t]), float64(mb.Teacher[t]))
			sum += c * v
			mean += v
			n++
			out.grad[t] += d.coef * c * g
		}
	}
	if n > 0 {
		m["distill/loss_kl_mean"] = mean / n
	}
	m["loss/distill"] = sum
	return d.coef * sum
}
