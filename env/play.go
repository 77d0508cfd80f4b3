package env

import (
	"context"
	"fmt"
)

// Step is one action and the environment's answer to it.
type Step struct {
	Action     string
	Transition Transition
}

// Episode is the text record of one played episode.
type Episode struct {
	Seed  int64
	Start Observation
	Steps []Step
	// Done reports whether the environment ended the episode within the step budget.
	Done bool
	// Reward is the Reward of the final step (the outcome reward) when Done.
	Reward float64
	// Success is Info[InfoSuccess] == "true" on the final step.
	Success bool
}

// Play runs agent on e for the task of seed until the episode ends or maxSteps actions were
// taken. It feeds the agent Start.Text first, then each transition's Observation. It is how
// experts produce demonstrations and how tests and benchmarks drive environments without a model.
// An error from the agent or the environment ends play and is returned with the steps so far.
func Play(ctx context.Context, e Env, agent Agent, seed int64, maxSteps int) (Episode, error) {
	ep := Episode{Seed: seed}
	obs, err := e.Reset(ctx, seed)
	if err != nil {
		return ep, fmt.Errorf("env: reset seed %d: %w", seed, err)
	}
	ep.Start = obs
	text := obs.Text
	for len(ep.Steps) < maxSteps {
		action, err := agent.Act(ctx, text)
		if err != nil {
			return ep, fmt.Errorf("env: agent, seed %d step %d: %w", seed, len(ep.Steps), err)
		}
		tr, err := e.Step(ctx, action)
		if err != nil {
			return ep, fmt.Errorf("env: step, seed %d step %d: %w", seed, len(ep.Steps), err)
		}
		ep.Steps = append(ep.Steps, Step{Action: action, Transition: tr})
		if tr.Done {
			ep.Done, ep.Reward, ep.Success = true, tr.Reward, tr.Info[InfoSuccess] == "true"
			return ep, nil
		}
		text = tr.Observation
	}
	return ep, nil
}

// PlayedCorpus is n samples of the text of played episodes, for training a tokenizer: first,
// then the start text, actions and non-empty observations of episodes on seeds 0, 1, 2, ... (at
// most maxSteps actions each), each played by the agent on the environment play returns for its
// seed. It is nil when n <= 0 or a play fails (a background play of an expert does not fail;
// stopping keeps a broken one from looping).
func PlayedCorpus(first string, n, maxSteps int, play func(seed int64) (Env, Agent)) []string {
	if n <= 0 {
		return nil
	}
	out := []string{first}
	for seed := int64(0); len(out) < n; seed++ {
		e, agent := play(seed)
		ep, err := Play(context.Background(), e, agent, seed, maxSteps)
		if err != nil {
			return nil
		}
		out = append(out, ep.Start.Text)
		for _, st := range ep.Steps {
			out = append(out, st.Action)
			if st.Transition.Observation != "" {
				out = append(out, st.Transition.Observation)
			}
		}
	}
	return out[:n]
}
