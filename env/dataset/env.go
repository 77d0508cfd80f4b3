package dataset

import (
	"context"
	"fmt"
	"math/rand/v2"

	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/reward"
	"github.com/agentrl/agentrl/tool"
	"github.com/agentrl/agentrl/traj"
)

// Spec is the dataset as an environment named name: train seeds [0, Train) are the train rows
// and held-out seeds [Train, len(Tasks)) the held-out ones, a seed being a row. An episode shows
// the prompt (System as its system prompt) and grades the one answer turn with the verifier:
// reward the score, success when it is full (reward.Solved). The expert answers the reference
// answer, after the demo field's turn when there is one (with probability noise, a wrong one);
// a dataset graded by regex, json-schema or test-cases has no expert, as its answers are
// patterns, schemas and tests. With a level field, the spec has the rows' levels: at level l,
// a seed picks among the rows of that level in its split.
func (d *Data) Spec(name string) env.Spec {
	s := d.spec(name, nil)
	if levels := d.Levels(); levels != nil {
		s.Levels = levels
		s.AtLevel = func(l int) env.Spec {
			var train, held []int
			for i, t := range d.Tasks {
				if t.Level == l {
					if t.HeldOut {
						held = append(held, i)
					} else {
						train = append(train, i)
					}
				}
			}
			return d.spec(name, func(seed int64) int {
				if seed < int64(d.Train) {
					return train[int(seed)%len(train)]
				}
				return held[int(seed-int64(d.Train))%len(held)]
			})
		}
	}
	return s
}

func (d *Data) spec(name string, pick func(int64) int) env.Spec {
	task := func(seed int64) (*Task, error) {
		if seed < 0 || seed >= int64(len(d.Tasks)) {
			return nil, fmt.Errorf("dataset %s: seed %d is not a row (0 to %d)", name, seed, len(d.Tasks)-1)
		}
		i := int(seed)
		if pick != nil {
			i = pick(seed)
		}
		return &d.Tasks[i], nil
	}
	return env.Spec{
		Name:        name,
		Description: fmt.Sprintf("tasks of %s (%d train, %d held out), graded %s", d.Config.Path, d.Train, len(d.Tasks)-d.Train, d.Config.Verifier),
		Train:       env.SeedRange{Lo: 0, Hi: int64(d.Train)},
		Heldout:     env.SeedRange{Lo: int64(d.Train), Hi: int64(len(d.Tasks))},
		New:         func() (env.Env, error) { return d.newEnv(task) },
		Expert: func(seed int64, noise float64, rng *rand.Rand) env.Agent {
			return &expert{d: d, task: task, seed: seed, wrong: noise > 0 && rng.Float64() < noise}
		},
		Corpus: func(n int) []string {
			out := make([]string, 0, n)
			for i := 0; len(out) < n; i++ {
				t := d.Tasks[i%len(d.Tasks)]
				out = append(out, d.Config.System+"\n"+t.Prompt+"\n"+t.Answer)
			}
			return out
		},
	}
}

type expert struct {
	d     *Data
	task  func(int64) (*Task, error)
	seed  int64
	wrong bool
	turn  int
}

func (e *expert) Act(context.Context, string) (string, error) {
	e.turn++
	if !e.d.Config.HasExpert() {
		return "", fmt.Errorf("dataset: a %s-graded dataset has no demonstrations (its answers are not replies)", e.d.Config.Verifier)
	}
	t, err := e.task(e.seed)
	if err != nil {
		return "", err
	}
	if e.wrong {
		return "I do not know.", nil
	}
	if e.turn == 1 && t.Demo != "" {
		return t.Demo, nil
	}
	return t.Answer, nil
}

// taskEnv is one single-turn episode of a dataset.
type taskEnv struct {
	d    *Data
	task func(int64) (*Task, error)
	cur  *Task
	done bool
}

func (e *taskEnv) Reset(_ context.Context, seed int64) (env.Observation, error) {
	t, err := e.task(seed)
	if err != nil {
		return env.Observation{}, err
	}
	e.cur, e.done = t, false
	return env.Observation{System: e.d.Config.System, Text: t.Prompt}, nil
}

func (e *taskEnv) Step(ctx context.Context, action string) (env.Transition, error) {
	switch {
	case e.cur == nil:
		return env.Transition{}, env.ErrNotReset
	case e.done:
		return env.Transition{}, env.ErrEpisodeDone
	}
	e.done = true
	score, err := e.d.score(ctx, e.cur, action)
	if err != nil {
		return env.Transition{}, err
	}
	info := map[string]string{env.InfoSuccess: fmt.Sprint(reward.Solved(score))}
	if e.cur.Level > 0 {
		info[env.InfoLevel] = fmt.Sprint(e.cur.Level)
	}
	return env.Transition{Role: traj.RoleEnv, Reward: score, Done: true, Info: info}, nil
}

func (d *Data) score(ctx context.Context, t *Task, response string) (float64, error) {
	s := reward.Sample{Prompt: t.Prompt, Response: response, Answer: t.Answer}
	switch d.Config.Verifier {
	case "exact":
		return reward.ExactMatch{}.Score(ctx, s)
	case "numeric":
		return reward.Numeric{RelTol: d.Config.withDefaults().Tolerance, AbsTol: 1e-12}.Score(ctx, s)
	case "rational":
		return reward.ExactNumber{}.Score(ctx, s)
	case "set":
		return reward.SetMatch{}.Score(ctx, s)
	case "regex":
		return reward.Format{Pattern: t.pattern}.Score(ctx, reward.Sample{Response: trimSpace(response)})
	case "json-schema":
		return t.schema.Score(ctx, s)
	case "test-cases":
		sb, err := d.sandbox()
		if err != nil {
			return 0, err
		}
		passed, _, err := runCases(ctx, sb, t.cases, response)
		if err != nil {
			return 0, fmt.Errorf("dataset: test cases: %w", err)
		}
		return gradeCases(passed, len(t.cases.Inputs)), nil
	case "judge":
		j, err := d.judge()
		if err != nil {
			return 0, err
		}
		v, verdict, err := j.Judge(ctx, s)
		if err != nil {
			return 0, err
		}
		d.verdicts[verdict].Add(1)
		return v, nil
	}
	return 0, fmt.Errorf("dataset: unknown verifier %q", d.Config.Verifier)
}

// newEnv makes an episode's environment, with its tools when the dataset names any.
func (d *Data) newEnv(task func(int64) (*Task, error)) (env.Env, error) {
	e := &taskEnv{d: d, task: task}
	if d.Config.ToolsFrom != "" {
		if d.provider == nil {
			return nil, fmt.Errorf("dataset: tasks.tools_from %s: the remote environment is not open", d.Config.ToolsFrom)
		}
		return env.WithTurnLimit(&remoteToolEnv{task: e, p: d.provider}, d.Config.withDefaults().MaxTurns), nil
	}
	if len(d.Config.Tools) == 0 {
		return e, nil
	}
	var tools []tool.Tool
	for _, name := range d.Config.Tools {
		switch name {
		case "calculator":
			c, err := tool.NewCalculator(tool.CalcLimits{})
			if err != nil {
				return nil, err
			}
			tools = append(tools, c)
		default:
			return nil, fmt.Errorf("dataset: unknown tool %q", name)
		}
	}
	return env.WithTurnLimit(env.WithTools(e, tools, env.ToolLimits{}), d.Config.withDefaults().MaxTurns), nil
}
