package config

import (
	"fmt"

	"github.com/agentrl/agentrl/algo"
)

// tinkerRefusals names, by their settings, what a run with `learner: {backend: tinker}` asks and
// the Tinker API cannot do, or what would read weights the run does not have: the adapter is
// trained and kept on the service, rollouts and evaluations sample from it there, and the run
// holds the base model alone.
func (c Config) tinkerRefusals() []error {
	if !c.Learner.Tinker() {
		return nil
	}
	var errs []error
	bad := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("learner.backend tinker: "+format, a...))
	}
	if c.Init == "" {
		bad("init is required: the run's model is the service's base model, whose folder (or hf:ORG/NAME) gives the run its tokenizer and chat template")
	}
	if c.Rollout.Generator != nil {
		bad("rollout.generator: rollouts sample from the Tinker service's sampler, not from inference servers of the run")
	}
	if c.Monitor.EntropyControl != nil {
		bad("monitor.entropy_control moves the entropy bonus, which Tinker's losses cannot carry (they see logprobs alone)")
	}
	for _, p := range c.Phases {
		where := "phase " + p.Name
		if p.Kind == "sft" {
			bad("%s: supervised phases train the run's own weights; a Tinker run's weights live on the service (run the SFT first, then start the RL run from its checkpoint as init)", where)
			continue
		}
		if p.Kind == "distill" || (p.RL != nil && p.RL.Distill != nil) {
			bad("%s: distillation scores with a teacher beside the run's own weights, which stay on the Tinker service", where)
		}
		if p.LoRA != nil {
			bad("%s: lora: the Tinker service trains its own LoRA adapter (learner.rank sets its rank)", where)
		}
		if p.Optim.GradClip > 0 {
			bad("%s: optim.grad_clip %g: Tinker's optim_step has no gradient clipping (set grad_clip: 0)", where, p.Optim.GradClip)
		}
		rl := p.RL
		if rl == nil {
			continue
		}
		if rl.Async != nil {
			bad("%s: rl.async: the Tinker backend trains the synchronous RL loop only", where)
		}
		if rl.Loss.EntropyCoef > 0 {
			bad("%s: rl.loss.entropy_coef: Tinker's losses carry logprobs alone, no entropy term", where)
		}
		if rl.Loss.KL.Coef > 0 || rl.KLPenalty != nil {
			bad("%s: rl.loss.kl and rl.kl_penalty need a frozen reference policy's logprobs, which Tinker's forward does not score", where)
		}
		if rl.Loss.Critic.Coef > 0 {
			bad("%s: rl.loss.critic: Tinker trains no value head", where)
		}
		if est, err := algo.NewEstimator(rl.Advantage); err == nil && algo.NeedsValues(est) {
			bad("%s: rl.advantage %s needs a value head, which Tinker does not train", where, rl.Advantage.Name)
		}
	}
	return errs
}
