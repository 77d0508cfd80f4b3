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
