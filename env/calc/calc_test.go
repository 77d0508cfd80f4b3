package calc

import (
	"context"
	"math/big"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"

	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/env/envtest"
	"github.com/agentrl/agentrl/tool"
)

func TestSuite(t *testing.T) { envtest.Run(t, Spec()) }

func TestRegistered(t *testing.T) {
	r := env.NewRegistry()
	if err := r.Register(Spec()); err != nil {
		t.Fatal(err)
	}
	s, err := r.Lookup("calc")
	if err != nil {
		t.Fatal(err)
	}
	if s.Train != TrainSeeds || s.Heldout != HeldoutSeeds {
		t.Errorf("registered ranges %v %v", s.Train, s.Heldout)
	}
}

var operandRE = regexp.MustCompile(`\d+`)

func TestNewTask(t *testing.T) {
	n := 3000
	if testing.Short() {
		n = 500
	}
	opsSeen := map[int]int{}
	questions := map[string]bool{}
	fractions := 0
	for seed := int64(0); seed < int64(n); seed++ {
		task := NewTask(seed)
		if again := NewTask(seed); again.Question != task.Question || again.Answer.Cmp(task.Answer) != 0 {
			t.Fatalf("seed %d: not reproducible: %q vs %q", seed, task.Question, again.Question)
		}
		if task.Ops < 1 || task.Ops > 3 {
			t.Errorf("seed %d: %d operators", seed, task.Ops)
		}
		opsSeen[task.Ops]++
		operands := operandRE.FindAllString(task.Expr, -1)
		if len(operands) != task.Ops+1 {
			t.Errorf("seed %d: %q has %d operands for %d operators", seed, task.Expr, len(operands), task.Ops)
		}
		for _, o := range operands {
			if len(o) < 2 || len(o) > 5 || o[0] == '0' {
				t.Errorf("seed %d: operand %q is not a 2–5 digit number", seed, o)
			}
		}
		if !strings.Contains(task.Question, task.Expr) {
			t.Errorf("seed %d: question %q does not show %q", seed, task.Question, task.Expr)
		}
		want, err := tool.Evaluate(task.Expr, tool.CalcLimits{})
		if err != nil || want.Cmp(task.Answer) != 0 {
			t.Errorf("seed %d: answer %v, calculator says %v (%v)", seed, task.Answer, want, err)
		}
		if !task.Answer.IsInt() {
			fractions++
		}
		questions[task.Question] = true
	}
	for ops := 1; ops <= 3; ops++ {
		if share := float64(opsSeen[ops]) / float64(n); share < 0.25 || share > 0.42 {
			t.Errorf("%d-operator tasks are %.2f of all, want about a third", ops, share)
		}
	}
	if len(questions) < n*99/100 {
		t.Errorf("only %d distinct questions in %d seeds", len(questions), n)
	}
	if fractions == 0 || fractions > n/3 {
		t.Errorf("%d of %d answers are fractions: want some, not most", fractions, n)
	}
}

func TestStepGrades(t *testing.T) {
	ctx := context.Background()
	e := &Env{}
	task := NewTask(7)
	right := tool.FormatRat(task.Answer)
	wrong := tool.FormatRat(new(big.Rat).Add(task.Answer, big.NewRat(1, 1)))
	for _, tc := range []struct {
		action  string
		reward  float64
		success string
	}{
		{"Answer: " + right, 1, "true"},
		{right, 1, "true"},
		{"Answer: " + wrong, 0, "false"},
		{"I don't know", 0, "false"},
	} {
		if _, err := e.Reset(ctx, 7); err != nil {
			t.Fatal(err)
		}
		tr, err := e.Step(ctx, tc.action)
		if err != nil {
			t.Fatal(err)
		}
		if tr.Reward != tc.reward || !tr.Done || tr.Info[env.InfoSuccess] != tc.success || tr.Info[InfoAnswer] != right {
			t.Errorf("%q: %+v, want reward %v success %s", tc.action, tr, tc.reward, tc.success)
		}
	}
}

// TestExpertRates checks that the clean expert always succeeds and that the noisy one succeeds
// about 1 - noise of the time, since each of its mistakes yields a wrong answer.
func TestExpertRates(t *testing.T) {
	n := 1000
	if testing.Short() {
		n = 300
	}
	ctx := context.Background()
	e, err := New()
	if err != nil {
		t.Fatal(err)
	}
	for _, noise := range []float64{0, 0.2, 0.5, 1} {
		wins, turns := 0, 0
		for i := range n {
			seed := HeldoutSeeds.Lo + int64(i)
			ep, err := env.Play(ctx, e, Expert(seed, noise, rand.New(rand.NewPCG(uint64(i), 9))), seed, MaxTurns)
			if err != nil {
				t.Fatal(err)
			}
			if !ep.Done {
				t.Fatalf("noise %v seed %d: episode did not end", noise, seed)
			}
			if ep.Success {
				wins++
			}
			turns += len(ep.Steps)
		}
		rate := float64(wins) / float64(n)
		t.Logf("noise %.1f: success %.3f, %.2f turns per episode", noise, rate, float64(turns)/float64(n))
		// Binomial standard deviation at n=300 is at most 0.029: allow four.
		if diff := rate - (1 - noise); diff < -0.12 || diff > 0.12 || (noise == 0 && rate != 1) || (noise == 1 && rate != 0) {
			t.Errorf("noise %v: success %.3f, want about %.2f", noise, rate, 1-noise)
		}
	}
}

func TestExpertDemonstration(t *testing.T) {
	ctx := context.Background()
	e, _ := New()
	ep, err := env.Play(ctx, e, Expert(3, 0, rand.New(rand.NewPCG(1, 2))), 3, MaxTurns)
	if err != nil {
		t.Fatal(err)
	}
	task := NewTask(3)
	want := []string{
		`<tool_call>{"name":"calculator","arguments":{"expression":"` + task.Expr + `"}}</tool_call>`,
		"Answer: " + tool.FormatRat(task.Answer),
	}
	if len(ep.Steps) != 2 || ep.Steps[0].Action != want[0] || ep.Steps[1].Action != want[1] {
		t.Fatalf("expert steps %+v, want %q", ep.Steps, want)
	}
	if obs := ep.Steps[0].Transition.Observation; obs != "<tool_response>"+tool.FormatRat(task.Answer)+"</tool_response>" {
		t.Errorf("tool observation %q", obs)
	}
	if !strings.HasPrefix(ep.Start.System, SystemPrompt+"\ncalculator(expression): ") {
		t.Errorf("system prompt %q", ep.Start.System)
	}
	if len(ep.Start.System) > 170 {
		t.Errorf("system prompt is %d bytes; keep it short for the tiny policy", len(ep.Start.System))
	}
}

func TestSlipDigit(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	for _, s := range []string{"7", "0", "-42", "7/3", "4821 * 37 + 9912", "100000"} {
		for range 200 {
			got := slipDigit(s, rng)
			if got == s || len(got) != len(s) {
				t.Fatalf("slipDigit(%q) = %q", s, got)
			}
			for _, num := range operandRE.FindAllString(got, -1) {
				if len(num) > 1 && num[0] == '0' {
					t.Fatalf("slipDigit(%q) = %q: leading zero", s, got)
				}
			}
		}
	}
}

func TestRoundGuess(t *testing.T) {
	for _, tc := range []struct{ v, want string }{
		{"188289", "190000"}, {"-188289", "-190000"}, {"995123", "1000000"}, {"42", "42"}, {"7/3", "2"}, {"-1/3", "0"}, {"149", "150"},
	} {
		r, _ := new(big.Rat).SetString(tc.v)
		if got := roundGuess(r); got != tc.want {
			t.Errorf("roundGuess(%s) = %s, want %s", tc.v, got, tc.want)
		}
	}
}

func TestCorpus(t *testing.T) {
	c := Corpus(50)
	if len(c) != 50 {
		t.Fatalf("%d samples", len(c))
	}
	joined := strings.Join(c, "")
	for _, want := range []string{"<tool_call>", "<tool_response>", "Answer: ", "error: ", SystemPrompt} {
		if !strings.Contains(joined, want) {
			t.Errorf("corpus lacks %q", want)
		}
	}
}

func BenchmarkExpertEpisode(b *testing.B) {
	ctx := context.Background()
	e, _ := New()
	steps := 0
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		seed := int64(i)
		ep, err := env.Play(ctx, e, Expert(seed, 0, rand.New(rand.NewPCG(uint64(seed), 1))), seed, MaxTurns)
		if err != nil || !ep.Success {
			b.Fatalf("seed %d: %v success %v", seed, err, ep.Success)
		}
		steps += len(ep.Steps)
	}
	b.ReportMetric(float64(steps)/b.Elapsed().Seconds(), "steps/s")
}

func TestSuiteNoTool(t *testing.T) { envtest.Run(t, NoToolSpec()) }

// TestLevels checks that a level fixes the number of operators and nothing else: operands and
// answers are drawn as in the default mix, and a seed gives one task per level.
func TestLevels(t *testing.T) {
	for _, l := range Levels {
		for seed := int64(0); seed < 200; seed++ {
			task := NewTaskAt(seed, l)
			if again := NewTaskAt(seed, l); again.Question != task.Question {
				t.Fatalf("level %d seed %d: not reproducible", l, seed)
			}
			operands := operandRE.FindAllString(task.Expr, -1)
			if task.Ops != l || len(operands) != l+1 {
				t.Errorf("level %d seed %d: %q has %d operators", l, seed, task.Expr, task.Ops)
			}
			want, err := tool.Evaluate(task.Expr, tool.CalcLimits{})
			if err != nil || want.Cmp(task.Answer) != 0 {
				t.Errorf("level %d seed %d: answer %v, calculator says %v (%v)", l, seed, task.Answer, want, err)
			}
		}
	}
	for _, l := range []int{0, MaxLevel + 1} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("NewTaskAt(1, %d) did not panic", l)
				}
			}()
			NewTaskAt(1, l)
		}()
	}
	// A level's environment poses its level's tasks.
	ctx := context.Background()
	e, err := Spec().AtLevel(4).New()
	if err != nil {
		t.Fatal(err)
	}
	obs, err := e.Reset(ctx, 11)
	if err != nil || obs.Text != NewTaskAt(11, 4).Question {
		t.Errorf("level 4 env posed %q (%v), want %q", obs.Text, err, NewTaskAt(11, 4).Question)
	}
}

// TestDefaultTasks pins the default mix's tasks: levels must leave `agentrl train`'s tasks as
// they were.
func TestDefaultTasks(t *testing.T) {
	for seed, want := range []string{
		"What is 90 - 74?", "Calculate 512 / 22610 - 27557 * 737.", "What is 86514 + 55493?",
	} {
		if got := NewTask(int64(seed)).Question; got != want {
			t.Errorf("seed %d: %q, want %q", seed, got, want)
		}
	}
}

// TestNoTool checks calc-notool: the same questions as calc, no tool in the prompt, an expert
// that answers in one turn, right at noise 0 and about 1 − noise of the time otherwise.
func TestNoTool(t *testing.T) {
	ctx := context.Background()
	e, err := NewNoTool()
	if err != nil {
		t.Fatal(err)
	}
	n := 300
	for _, noise := range []float64{0, 0.5, 1} {
		wins := 0
		for i := range n {
			seed := HeldoutSeeds.Lo + int64(i)
			ep, err := env.Play(ctx, e, NoToolSpec().Expert(seed, noise, rand.New(rand.NewPCG(uint64(i), 9))), seed, MaxTurns)
			if err != nil {
				t.Fatal(err)
			}
			if ep.Start.System != SystemPromptNoTool || ep.Start.Text != NewTask(seed).Question {
				t.Fatalf("seed %d: prompt %q / %q", seed, ep.Start.System, ep.Start.Text)
			}
			if len(ep.Steps) != 1 || !strings.HasPrefix(ep.Steps[0].Action, "Answer: ") {
				t.Fatalf("seed %d: expert steps %+v", seed, ep.Steps)
			}
			if ep.Success {
				wins++
			}
		}
		rate := float64(wins) / float64(n)
		if diff := rate - (1 - noise); diff < -0.12 || diff > 0.12 || (noise == 0 && rate != 1) || (noise == 1 && rate != 0) {
			t.Errorf("noise %v: success %.3f, want about %.2f", noise, rate, 1-noise)
		}
	}
	// A tool call is an answer like any other: graded, not executed.
	if _, err := e.Reset(ctx, 3); err != nil {
		t.Fatal(err)
	}
	tr, err := e.Step(ctx, calculatorCall(NewTask(3).Expr))
	if err != nil || !tr.Done || len(tr.ToolCalls) != 0 {
		t.Errorf("tool call in calc-notool: %+v, %v", tr, err)
	}
	joined := strings.Join(NoToolSpec().Corpus(30), "")
	if strings.Contains(joined, "<tool_call>") || strings.Contains(joined, "calculator") || !strings.Contains(joined, SystemPromptNoTool) {
		t.Errorf("calc-notool corpus shows a tool or lacks its prompt")
	}
}
