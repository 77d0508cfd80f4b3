package calc

import (
	"context"
	"math/rand/v2"
	"strings"

	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/tool"
)

// corpusSalt separates the corpus's expert rng from the suite's and the trainer's.
const corpusSalt = 0xc0ffee

// brokenCalls are calls a policy writes early in training; their error observations belong in
// the tokenizer's text too.
var brokenCalls = []string{"1 / 0", "12 * (3 + 4", "7 +", "2 ^ 0.5", "4821 x 37"}

// Corpus returns n episodes rendered as text — system prompt with the tool line, question, the
// noisy expert's turns and the tool responses — for training a tokenizer on exactly what the
// policy will read and write. Every fifth sample also shows a calculator error. Deterministic.
func Corpus(n int) []string { return variant{}.corpus(n) }

// corpus is Corpus of v; calc-notool's shows no calculator.
func (v variant) corpus(n int) []string {
	out := make([]string, 0, max(n, 0))
	e, err := v.new()
	if err != nil {
		return nil
	}
	ctx := context.Background()
	for i := range n {
		seed := TrainSeeds.Lo + int64(i)*7919%TrainSeeds.Len()
		rng := rand.New(rand.NewPCG(uint64(seed), corpusSalt))
		ep, err := env.Play(ctx, e, v.expert(seed, 0.3, rng), seed, MaxTurns)
		if err != nil {
			return out // cannot happen for the built-in env; a short corpus still works
		}
		var b strings.Builder
		b.WriteString(ep.Start.System + "\n" + ep.Start.Text + "\n")
		for _, st := range ep.Steps {
			b.WriteString(st.Action + "\n")
			if st.Transition.Observation != "" {
				b.WriteString(st.Transition.Observation + "\n")
			}
		}
		if i%5 == 4 && !v.noTool {
			expr := brokenCalls[(i/5)%len(brokenCalls)]
			_, err := tool.Evaluate(expr, tool.CalcLimits{})
			b.WriteString(calculatorCall(expr) + "\n<tool_response>error: " + err.Error() + "</tool_response>\n")
		}
		out = append(out, b.String())
	}
	return out
}
