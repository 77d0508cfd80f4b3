// Package algo is the policy-optimization math of agentrl: advantage estimators, policy losses,
// KL estimators, the entropy bonus, the critic loss, importance-weight corrections for off-policy
// and train/inference mismatch, and the one function that turns the loss mask into a normalisation.
//
// It is pure math over slices. It does not run a model, sample, tokenize, read files or keep a
// clock: the learner gives it a Batch of sequences (flat per-token slices with offsets), the
// model's current logprobs, entropies and values for a minibatch of those sequences, and gets back
// a scalar loss, d(loss)/d(logprob), d(loss)/d(entropy), d(loss)/d(value) per token and metrics.
//
// The learner's loop, per step:
//
//	b, _ := algo.FromTrajectories(trajs)      // once per batch
//	b.Old = recomputed logprobs               // when the mode uses a proximal policy
//	b.Values = the critic's values            // for "gae", "gae-turn" (and value clipping)
//	est, _ := algo.NewEstimator(advCfg)       // "grpo", "gae", "gigpo", ...
//	est.Estimate(b)                           // advantages over all sequences and groups at once
//	loss, _ := algo.NewLoss(lossCfg)          // "ppo", "gspo", "sapo", "cispo", "reinforce"
//	for _, idx := range b.Minibatches(n, rng) {
//		mb, _ := b.Select(idx)
//		cur := model forward on mb            // logprobs, entropies, values per token
//		loss.Compute(&out, mb, cur)           // out.DLogprobs etc. go to the model's backward
//	}
//
// Extension points (advantage estimators, policy losses) are registered by name in Registry
// values; Estimators() and PolicyLosses() return fresh registries holding the built-ins, so there
// is no global state to reset. Each extension point has exactly one signature.
//
// Every formula cites its paper and uses cleanrl's names (ratio, pgLoss1, pgLoss2, clipFrac,
// approxKL). Reference conventions follow what verl's core_algos implements, so numbers are
// comparable across stacks: ratio = exp(clamp(logπ − logπ_old, −20, 20)); GSPO's log sequence
// ratio is clamped above at 10 only; k3 is clamped at 10 (zero gradient beyond); GRPO uses the
// unbiased std with ε = 1e-6 and treats a group of one as mean 0, std 1; GAE and REINFORCE++
// whiten their advantages over the batch's masked tokens; the aggregation modes keep verl's names
// and numbers; the critic loss is compute_value_loss, ½·max((V−R)², (clip(V, V_old ± ε) − R)²)
// under the policy loss's aggregation (critic.clip 0 turns the clipping off, which verl has no
// setting for). Where agentrl departs from verl it says so under a name or option of its own:
// "dr-grpo" aggregation, gae.no_whiten, and turn-level estimators (gigpo, turn-return) that verl
// lacks. A non-failed sequence with no trainable token counts with its return in every group
// baseline, as verl's GRPO counts it.
package algo
