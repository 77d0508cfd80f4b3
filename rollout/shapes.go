package rollout

import (
	"context"
	"errors"
	"fmt"

	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/tokenizer"
)

// ErrRender marks a CheckShapes failure of the Conversation itself (as opposed to the
// environment or the agent that played it).
var ErrRender = errors.New("render")

// ShapeCheck is how a Conversation renders one environment's turn shapes.
type ShapeCheck struct {
	Turns int // assistant turns played
	// Splits names each shape whose render was not prefix-stable, in order: "observation (tool)
	// after turn 2", "final (user) after turn 3". Empty when every turn appended.
	Splits []string
}

// CheckShapes plays one episode of e (task seed) with agent writing the assistant turns, at most
// maxTurns, and renders every turn shape through a Conversation from newConv: the prompt, each
// observation and the final observation. It reports the shapes at which the Conversation split
// (traj.Trajectory.Samples), so that a run can say at its start which templates split which of
// its environments' episodes. Errors of the Conversation wrap ErrRender.
func CheckShapes(ctx context.Context, newConv func() Conversation, tok *tokenizer.Tokenizer, e env.Env, agent env.Agent, seed int64, maxTurns int) (ShapeCheck, error) {
	var sc ShapeCheck
	conv := newConv()
	obs, err := e.Reset(ctx, seed)
	if err != nil {
		return sc, fmt.Errorf("reset: %w", err)
	}
	if _, _, err := conv.Start(obs.System, obs.Text); err != nil {
		return sc, fmt.Errorf("%w prompt: %w", ErrRender, err)
	}
	stop := conv.Stop()
	if len(stop) == 0 {
		return sc, fmt.Errorf("%w: the conversation has no stop tokens", ErrRender)
	}
	text := obs.Text
	for sc.Turns < maxTurns {
		action, err := agent.Act(ctx, text)
		if err != nil {
			return sc, fmt.Errorf("agent: %w", err)
		}
		sc.Turns++
		step, err := e.Step(ctx, action)
		if err != nil {
			return sc, fmt.Errorf("step: %w", err)
		}
		if step.Observation == "" && step.Done {
			return sc, nil
		}
		completion := append(tok.Encode(action), stop[0])
		shape := "observation"
		if step.Done {
			shape = "final"
		}
		_, split, err := conv.Next(completion, chatRole(step.Role), step.Observation, step.Done)
		if err != nil {
			return sc, fmt.Errorf("%w %s after turn %d: %w", ErrRender, shape, sc.Turns, err)
		}
		if split {
			sc.Splits = append(sc.Splits, fmt.Sprintf("%s (%s) after turn %d", shape, chatRole(step.Role), sc.Turns))
		}
		if step.Done {
			return sc, nil
		}
		text = step.Observation
	}
	return sc, nil
}
