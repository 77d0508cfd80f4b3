package calc

import (
	"fmt"
	"math/big"
	"math/rand/v2"
	"strings"

	"github.com/agentrl/agentrl/tool"
)

// Task is one arithmetic question.
type Task struct {
	Seed     int64
	Ops      int    // number of operators, 1–3: the difficulty
	Expr     string // the expression as shown, e.g. "4821 * 37 + 9912"
	Question string // the first user message
	Answer   *big.Rat
}

// taskSalt separates the task stream from other uses of the same seed.
const taskSalt = 0xca1c

// Question templates. Few and short: the tiny policy should spend its capacity on copying the
// expression, not on parsing phrasing.
var templates = []string{"What is %s?", "Compute %s.", "Calculate %s."}

// NewTask generates the task of seed. The same seed always gives the same task. Difficulty grows
// with the number of operators (1–3, drawn per seed); operands have 2–5 digits, so even one
// product is too large to do in one's head. Division appears in one operator of ten and may make
// the answer a fraction.
func NewTask(seed int64) Task {
	rng := rand.New(rand.NewPCG(uint64(seed), taskSalt))
	for {
		ops, expr := draw(rng)
		ans, err := tool.Evaluate(expr, tool.CalcLimits{})
		if err != nil {
			// Only a grouped difference that is zero under a division gets here ("12 / (45 - 45)");
			// draw again from the same stream, so the seed still determines the task.
			continue
		}
		return Task{
			Seed:     seed,
			Ops:      ops,
			Expr:     expr,
			Question: fmt.Sprintf(templates[rng.IntN(len(templates))], expr),
			Answer:   ans,
		}
	}
}

// draw makes one candidate expression.
func draw(rng *rand.Rand) (ops int, expr string) {
	ops = 1 + rng.IntN(3)
	operands := make([]string, ops+1)
	for i := range operands {
		operands[i] = operand(rng)
	}
	operators := make([]string, ops)
	for i := range operators {
		switch r := rng.IntN(10); {
		case r < 4:
			operators[i] = "+"
		case r < 6:
			operators[i] = "-"
		case r < 9:
			operators[i] = "*"
		default:
			operators[i] = "/"
		}
	}
	// With two or more operators, sometimes group one adjacent pair.
	group := -1
	if ops >= 2 && rng.IntN(3) == 0 {
		group = rng.IntN(ops)
	}
	var b strings.Builder
	for i, x := range operands {
		if i > 0 {
			b.WriteString(" " + operators[i-1] + " ")
		}
		if i == group {
			b.WriteByte('(')
		}
		b.WriteString(x)
		if i == group+1 && group >= 0 {
			b.WriteByte(')')
		}
	}
	return ops, b.String()
}

// operand draws a 2–5 digit number without a leading zero (never zero, so division is safe).
func operand(rng *rand.Rand) string {
	digits := 2 + rng.IntN(4)
	lo := pow10(digits - 1)
	return fmt.Sprint(lo + rng.Int64N(9*lo))
}

func pow10(n int) int64 {
	p := int64(1)
	for range n {
		p *= 10
	}
	return p
}
