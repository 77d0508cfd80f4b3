package calc

import (
	"context"
	"encoding/json"
	"math/big"
	"math/rand/v2"
	"strings"

	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/reward"
	"github.com/agentrl/agentrl/tool"
)

// mistake is what a noisy expert does instead of the right thing.
type mistake int

const (
	noMistake  mistake = iota
	guessRound         // skip the tool, answer a rounded estimate
	guessSlip          // skip the tool, answer the right number with one digit wrong
	exprSlip           // call the tool with one operand digit wrong, then trust its result
)

// expert solves calc tasks the way the policy should: one calculator call with the whole
// expression, then "Answer: N" copied from the tool's response.
type expert struct {
	task    Task
	noTool  bool // calc-notool: answer at once
	mistake mistake
	wrong   string // the wrong answer of guessRound and guessSlip
	expr    string // the expression it sends to the calculator
	turn    int
}

// Expert returns the expert for the task of seed. With probability noise it makes one mistake,
// chosen by rng among: answering a rounded estimate without the tool (45%), answering with a
// digit slip without the tool (45%), or slipping a digit of an operand in the calculator call
// (10%). Every mistake
// yields a wrong answer, so its success rate is 1 - noise. All choices come from rng alone.
func Expert(seed int64, noise float64, rng *rand.Rand) env.Agent {
	return variant{}.expert(seed, noise, rng)
}

// expert is the expert of v. calc-notool's writes the exact answer at once; with probability
// noise it answers a rounded estimate (50%) or the answer with a digit slipped (50%) instead.
func (v variant) expert(seed int64, noise float64, rng *rand.Rand) env.Agent {
	x := &expert{task: newTask(seed, v.level), noTool: v.noTool}
	x.expr = x.task.Expr
	if rng.Float64() >= noise {
		return x
	}
	// Skipping the tool is the mistake the policy should unlearn; a slip inside the calculator
	// call is rarer, because demonstrations that copy imprecisely teach imprecise copying.
	switch u := rng.Float64(); {
	case v.noTool && u < 0.5:
		x.mistake = guessRound
	case v.noTool:
		x.mistake = guessSlip
	case u < 0.45:
		x.mistake = guessRound
	case u < 0.9:
		x.mistake = guessSlip
	default:
		x.mistake = exprSlip
	}
	switch x.mistake {
	case guessRound:
		x.wrong = roundGuess(x.task.Answer)
		if v, _ := reward.LastRational(x.wrong); v.Cmp(x.task.Answer) == 0 {
			x.mistake, x.wrong = guessSlip, slipDigit(tool.FormatRat(x.task.Answer), rng)
		}
	case guessSlip:
		x.wrong = slipDigit(tool.FormatRat(x.task.Answer), rng)
	case exprSlip:
		x.expr = slipDigit(x.task.Expr, rng)
		if v, err := tool.Evaluate(x.expr, tool.CalcLimits{}); err != nil || v.Cmp(x.task.Answer) == 0 {
			x.mistake, x.expr = guessSlip, x.task.Expr
			x.wrong = slipDigit(tool.FormatRat(x.task.Answer), rng)
		}
	}
	return x
}

// Act answers the question with a tool call and a tool response with the answer.
func (x *expert) Act(_ context.Context, obs string) (string, error) {
	x.turn++
	switch {
	case x.mistake == guessRound || x.mistake == guessSlip:
		return answer(x.wrong), nil
	case x.noTool:
		return answer(tool.FormatRat(x.task.Answer)), nil
	case x.turn == 1:
		return calculatorCall(x.expr), nil
	}
	if res, ok := toolResult(obs); ok {
		return answer(res), nil
	}
	// The call failed (it does not at noise 0): fall back on what the expert knows.
	return answer(tool.FormatRat(x.task.Answer)), nil
}

func answer(n string) string { return "Answer: " + n }

// calculatorCall is the exact text of a calculator call, compact JSON to save tokens.
func calculatorCall(expr string) string {
	body, _ := json.Marshal(struct {
		Name      string `json:"name"`
		Arguments struct {
			Expression string `json:"expression"`
		} `json:"arguments"`
	}{Name: "calculator", Arguments: struct {
		Expression string `json:"expression"`
	}{expr}})
	return tool.OpenTag + string(body) + tool.CloseTag
}

// toolResult extracts the first successful result from a tool observation.
func toolResult(obs string) (string, bool) {
	const open, close = "<tool_response>", "</tool_response>"
	i := strings.Index(obs, open)
	j := strings.Index(obs, close)
	if i < 0 || j < i {
		return "", false
	}
	res := obs[i+len(open) : j]
	if res == "" || strings.HasPrefix(res, "error") {
		return "", false
	}
	return res, true
}

// roundGuess rounds v to two significant digits, as a person estimating would: 188289 → 190000,
// 7/3 → 2.
func roundGuess(v *big.Rat) string {
	n := new(big.Int).Quo(v.Num(), v.Denom()) // truncated integer part
	s := n.String()
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	if len(s) > 2 {
		head := new(big.Int)
		head.SetString(s[:3], 10)
		head.Add(head, big.NewInt(5))
		head.Quo(head, big.NewInt(10))
		s = head.String() + strings.Repeat("0", len(s)-2)
	}
	if neg && s != "0" {
		s = "-" + s
	}
	return s
}

// slipDigit changes one digit of s to another, never putting a zero at the head of a number, so
// the result is a different, well-formed number or expression.
func slipDigit(s string, rng *rand.Rand) string {
	var pos []int
	for i := 0; i < len(s); i++ {
		if s[i] >= '0' && s[i] <= '9' {
			pos = append(pos, i)
		}
	}
	i := pos[rng.IntN(len(pos))]
	lead := i == 0 || s[i-1] < '0' || s[i-1] > '9'
	var choices []byte
	for d := byte('0'); d <= '9'; d++ {
		if d != s[i] && !(lead && d == '0') {
			choices = append(choices, d)
		}
	}
	b := []byte(s)
	b[i] = choices[rng.IntN(len(choices))]
	return string(b)
}
