package maze

import (
	"context"
	"fmt"
	"strings"

	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/traj"
)

// System is the system prompt. It is short on purpose: the built-in policy pays for it every turn.
const System = "Reach the goal G. You see the cells next to you: # wall, . open, A you. " +
	"Reply with one move: up, down, left or right."

// Keys of Transition.Info besides env.InfoSuccess and env.InfoTruncated.
const (
	// InfoState is the agent's cell after the step, "x,y". Within one task it identifies the
	// true state exactly, so step-level credit assignment (GiGPO anchor states) can group the
	// steps of a rollout group that stand in the same place.
	InfoState = "state"
	// InfoView is the local view after the step (the observation without its prefix line). Equal
	// views recur across positions and tasks: it is what the agent can tell apart.
	InfoView = "view"
	// InfoMove is the move the step applied ("up", ...; "none" for an invalid action).
	InfoMove = "move"
)

// TruncatedMaxSteps is the Info[env.InfoTruncated] value when the step budget ran out.
const TruncatedMaxSteps = "max_steps"

// mazeEnv is one episode at a time; not safe for concurrent use (the env contract).
type mazeEnv struct {
	cfg         Config
	t           *task
	pos         cell
	steps       int
	reset, done bool
}

// New returns a maze environment. It needs no tools: actions are moves.
func New(cfg Config) (env.Env, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &mazeEnv{cfg: cfg}, nil
}

func (e *mazeEnv) Reset(ctx context.Context, seed int64) (env.Observation, error) {
	if err := ctx.Err(); err != nil {
		return env.Observation{}, fmt.Errorf("maze: reset: %w", err)
	}
	e.t = newTask(seed, e.cfg)
	e.pos, e.steps, e.reset, e.done = e.t.start, 0, true, false
	return env.Observation{System: System, Text: view(e.t, e.pos)}, nil
}

func (e *mazeEnv) Step(ctx context.Context, action string) (env.Transition, error) {
	switch {
	case !e.reset:
		return env.Transition{}, env.ErrNotReset
	case e.done:
		return env.Transition{}, env.ErrEpisodeDone
	}
	if err := ctx.Err(); err != nil {
		return env.Transition{}, fmt.Errorf("maze: step: %w", err)
	}
	e.steps++
	tr := env.Transition{Role: traj.RoleEnv, Info: map[string]string{}}
	prefix := ""
	m := parseMove(action)
	switch {
	case m < 0:
		prefix = "invalid move\n"
		tr.Info[InfoMove] = "none"
	default:
		tr.Info[InfoMove] = moves[m].name
		next, ok := e.t.g.step(e.pos, m)
		if !ok {
			prefix = "bump\n"
		}
		e.pos = next
	}
	tr.Info[InfoState] = fmt.Sprintf("%d,%d", e.pos.X, e.pos.Y)
	v := view(e.t, e.pos)
	tr.Info[InfoView] = v
	switch {
	case e.pos == e.t.goal:
		e.done = true
		tr.Observation, tr.Reward, tr.Done = "goal reached", 1, true
		tr.Info[env.InfoSuccess] = "true"
	case e.steps >= e.t.maxSteps:
		e.done = true
		tr.Observation, tr.Reward, tr.Done = "out of moves", -e.cfg.StepPenalty, true
		tr.Info[env.InfoSuccess] = "false"
		tr.Info[env.InfoTruncated] = TruncatedMaxSteps
	default:
		tr.Observation, tr.Reward = prefix+v, -e.cfg.StepPenalty
	}
	return tr, nil
}

// view renders the 3×3 window around the agent's cell plus the goal's offset:
//
//	#.#
//	.A.
//	###
//	goal: up 2, right 3
//
// The four edge characters say whether the passage that way is open ('.'), walled ('#') or leads
// straight to the goal ('G'); the corners are always wall. Only the goal's offset is global
// information — the walls beyond the window stay hidden, so the task is partially observable and
// a policy must explore around dead ends it cannot see.
func view(t *task, c cell) string {
	ch := func(i int) byte {
		nb, ok := t.g.step(c, i)
		switch {
		case !ok:
			return '#'
		case nb == t.goal:
			return 'G'
		}
		return '.'
	}
	var b strings.Builder
	b.Grow(40)
	b.WriteString("#")
	b.WriteByte(ch(0))
	b.WriteString("#\n")
	b.WriteByte(ch(2))
	b.WriteByte('A')
	b.WriteByte(ch(3))
	b.WriteString("\n#")
	b.WriteByte(ch(1))
	b.WriteString("#\ngoal:")
	dx, dy := t.goal.X-c.X, t.goal.Y-c.Y
	sep := " "
	if dy < 0 {
		fmt.Fprintf(&b, "%sup %d", sep, -dy)
		sep = ", "
	} else if dy > 0 {
		fmt.Fprintf(&b, "%sdown %d", sep, dy)
		sep = ", "
	}
	if dx < 0 {
		fmt.Fprintf(&b, "%sleft %d", sep, -dx)
	} else if dx > 0 {
		fmt.Fprintf(&b, "%sright %d", sep, dx)
	}
	return b.String()
}

// parseMove returns the index in moves of the last move word in action (case-insensitive, words
// split on anything but ASCII letters), or -1 when there is none. Taking the last word lets a
// policy think aloud before committing ("left is a wall, so: up"). It scans from the end, so a
// huge action costs one pass at most.
func parseMove(action string) int {
	end := len(action)
	for end > 0 {
		for end > 0 && !isLetter(action[end-1]) {
			end--
		}
		start := end
		for start > 0 && isLetter(action[start-1]) {
			start--
		}
		if w := action[start:end]; len(w) <= 5 {
			for i, m := range moves {
				if strings.EqualFold(w, m.name) {
					return i
				}
			}
		}
		end = start
	}
	return -1
}

func isLetter(b byte) bool { return b|0x20 >= 'a' && b|0x20 <= 'z' }
