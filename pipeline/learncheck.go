package pipeline

// warnNothingLearned says, at the end of a run, when no evaluation scored above 0%: the run
// "succeeded" on a policy that solves nothing, and checkpoints/best is only the last one.
func (r *Run) warnNothingLearned() {
	if len(r.evals) == 0 || r.state.Best > 0 {
		return
	}
	r.printf("warning: no held-out evaluation scored above 0%% (%d evaluations): the policy learned nothing measurable; checkpoints/best is only the last policy evaluated. Check the learning rate, rollout.max_context and the metrics (explore/entropy, signal/grad_norm) before serving it\n", len(r.evals))
}
