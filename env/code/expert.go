package code

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"

	"github.com/agentrl/agentrl/tool"
)

// Expert solves the task of its seed: it first tries its function on the prompt's example with
// the python tool, then answers with the function in a ```python block. With probability noise
// it answers with a plausible buggy version (an off-by-one or a wrong bound, which fails at
// least one hidden case), and independently with probability noise it skips the try-out.
// Both choices are drawn from rng when the expert is made, so a seed and an rng state
// reproduce the episode.
type Expert struct {
	prob   *problem
	code   string
	tryOut bool
	turn   int
}

// NewExpert returns the expert for the task of seed.
func NewExpert(seed int64, noise float64, rng *rand.Rand) *Expert {
	p := newProblem(seed)
	x := &Expert{prob: p, code: p.solution, tryOut: true}
	if rng.Float64() < noise {
		x.code = p.buggy
	}
	if rng.Float64() < noise {
		x.tryOut = false
	}
	return x
}

// Act returns a tool call on the first turn when trying out, and the answer otherwise. The
// observations are not needed: the expert knows its solution.
func (x *Expert) Act(_ context.Context, _ string) (string, error) {
	x.turn++
	if x.turn == 1 && x.tryOut {
		return tryOutCall(x.prob, x.code)
	}
	return answerText(x.code), nil
}

// tryOutCall is a python tool call that defines the function and prints it on the example.
func tryOutCall(p *problem, code string) (string, error) {
	call := struct {
		Name      string            `json:"name"`
		Arguments map[string]string `json:"arguments"`
	}{Name: "python", Arguments: map[string]string{"code": code + "print(" + callExpr(p.fn, p.example.args) + ")\n"}}
	b, err := json.Marshal(call)
	if err != nil {
		return "", fmt.Errorf("code: expert tool call: %w", err)
	}
	return "Let me try it on the example.\n" + tool.OpenTag + string(b) + tool.CloseTag, nil
}

func answerText(code string) string { return "```python\n" + code + "```" }
