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
	Ops      int    // number of operators, 1–3 (1–MaxLevel at a level): the difficulty
	Expr     string // the expression as shown, e.g. "4821 * 37 + 9912"
	Question string // the first user message
	Answer   *big.Rat
}

// taskSalt separates the task stream from other uses of the same seed.
const taskSalt = 0xca1c

// Question templates. Few and short: the tiny policy should spend its capacity on copying the
// expression, not on parsing phrasing.
var templates = []string{"What is %s?", "Compute %s.", "Calculate %s."}

// Levels are the difficulty levels of the environment: level l is a task of l operators.
// Levels 1–3 make up the default mix; level 4 is harder than any default task.
var Levels = []int{1, 2, 3, 4}

// MaxLevel is the highest level.
const MaxLevel = 4

// NewTask generates the task of seed. The same seed always gives the same task. Difficulty grows
// with the number of operators (1–3, drawn per seed); operands have 2–5 digits, so even one
// product is too large to do in one's head. Division appears in one operator of ten and may make
// the answer a fraction.
func NewTask(seed int64) Task { return newTask(seed, 0) }

// NewTaskAt generates the task of seed at level (1–MaxLevel): one of level operators, drawn as
// NewTask draws its tasks otherwise. The same seed and level always give the same task.
func NewTaskAt(seed int64, level int) Task {
	if level < 1 || level > MaxLevel {
		panic(fmt.Sprintf("calc: level %d outside [1, %d]", level, MaxLevel))
	}
	return newTask(seed, level)
}

// newTask is NewTask with level 0 and NewTaskAt otherwise.
func newTask(seed int64, level int) Task {
	rng := rand.New(rand.NewPCG(uint64(seed), taskSalt))
	for {
		ops, expr := draw(rng, level)
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

// draw makes one candidate expression of ops operators, 1–3 drawn from rng when ops is 0.
func draw(rng *rand.Rand, ops int) (int, string) {
	if ops == 0 {
		ops = 1 + rng.IntN(3)
	}
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
