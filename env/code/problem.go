package code

import (
	"fmt"
	"math/rand/v2"
	"reflect"
)

// problem is one task: a function to write, its hidden tests, and the expert's two versions of
// it. The reference answers are computed in Go (solve), independently of the Python sources, so
// the tests that run the Python solution against them check both.
type problem struct {
	family string
	fn     string // function name the answer must define
	text   string // one-line statement shown to the agent
	cases  []testCase
	// example is the case shown in the prompt; it is also cases[0].
	example testCase
	// solution is a correct Python definition of fn; buggy is a plausible wrong one (an
	// off-by-one, a wrong bound) that fails at least one hidden case.
	solution, buggy string
}

type testCase struct {
	args []any // int, string or []int
	want any   // int, bool, string or []int
}

// template makes problems of one kind. draw picks the task's constants and returns the
// statement, the two Python sources, Go versions of both, and an input generator.
type template struct {
	family string
	fn     string
	draw   func(r *rand.Rand) instance
}

type instance struct {
	text            string
	solution, buggy string
	solve, bug      func(args []any) any
	input           func(r *rand.Rand) []any
}

// numCases is how many hidden tests a problem has; maxDistinguishDraws bounds the search for
// an input on which the buggy version is wrong.
const (
	numCases            = 6
	maxDistinguishDraws = 200
)

// problemSalt separates the problem stream from other uses of the seed.
const problemSalt = 0xc0de

// newProblem generates the task of seed. The same seed gives the same problem on every
// machine: the stream is PCG seeded from it.
func newProblem(seed int64) *problem {
	r := rand.New(rand.NewPCG(uint64(seed), problemSalt))
	tp := templates[r.IntN(len(templates))]
	in := tp.draw(r)
	p := &problem{family: tp.family, fn: tp.fn, text: in.text, solution: in.solution, buggy: in.buggy}
	distinguishes := false
	for range numCases {
		args := in.input(r)
		want := in.solve(args)
		if !reflect.DeepEqual(want, in.bug(args)) {
			distinguishes = true
		}
		p.cases = append(p.cases, testCase{args: args, want: want})
	}
	// Make sure the buggy version fails: replace the last case by one that tells the two apart.
	// Every template has such inputs within a few draws; the bound only guards the loop.
	for i := 0; !distinguishes && i < maxDistinguishDraws; i++ {
		args := in.input(r)
		want := in.solve(args)
		if !reflect.DeepEqual(want, in.bug(args)) {
			p.cases[numCases-1] = testCase{args: args, want: want}
			distinguishes = true
		}
	}
	p.example = p.cases[0]
	return p
}

// prompt is the task as the agent sees it: the statement and one example.
func (p *problem) prompt() string {
	return fmt.Sprintf("%s\nExample: %s == %s", p.text, callExpr(p.fn, p.example.args), pyRepr(p.example.want))
}

// callExpr renders fn(args...) as Python.
func callExpr(fn string, args []any) string {
	s := fn + "("
	for i, a := range args {
		if i > 0 {
			s += ", "
		}
		s += pyRepr(a)
	}
	return s + ")"
}
