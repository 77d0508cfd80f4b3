package parts

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/env/envtest"
)

func TestSuite(t *testing.T) { envtest.Run(t, Spec()) }

// Sub-tasks that name items of the task are graded by their cost; others are not the
// environment's; the grader is found through the wrappers.
func TestGradeSubtask(t *testing.T) {
	e := New(3)
	g := env.SubtaskGraderOf(e)
	if g == nil {
		t.Fatal("no SubtaskGrader through the wrappers")
	}
	if _, ok := g.GradeSubtask("x", "1"); ok {
		t.Fatal("graded before Reset")
	}
	if _, err := e.Reset(context.Background(), 4); err != nil {
		t.Fatal(err)
	}
	tk := newTask(4, 3)
	a, b := tk.items[0], tk.items[1]
	for _, c := range []struct {
		sub, ans string
		want     float64
		ok       bool
	}{
		{"cost of " + a.name, strconv.Itoa(a.price * a.quantity), 1, true},
		{"cost of " + a.name, strconv.Itoa(a.price*a.quantity + 1), 0, true},
		{"cost of " + a.name + " and " + b.name, "total " + strconv.Itoa(a.price*a.quantity+b.price*b.quantity), 1, true},
		{"cost of nothing", "0", 0, false},
	} {
		r, ok := g.GradeSubtask(c.sub, c.ans)
		if r != c.want || ok != c.ok {
			t.Errorf("%q %q: %v %v, want %v %v", c.sub, c.ans, r, ok, c.want, c.ok)
		}
	}
	if len(tk.items) != ItemsAt(3) {
		t.Fatalf("%d items at level 3", len(tk.items))
	}
}

// No item's name holds another's: a sub-task naming one item is graded for that item alone.
func TestNamesDoNotNest(t *testing.T) {
	for i, a := range names {
		for j, b := range names {
			if i != j && strings.Contains(a, b) {
				t.Fatalf("%q holds %q", a, b)
			}
		}
	}
	if len(names) < ItemsAt(Levels[len(Levels)-1]) {
		t.Fatalf("%d names for %d items", len(names), ItemsAt(Levels[len(Levels)-1]))
	}
}

// A difficulty mix keeps the delegating expert, at each task's level: its sub-tasks name that
// level's items.
func TestDifficultyKeepsTheDelegatingExpert(t *testing.T) {
	mix, err := env.WithDifficulty(Spec(), env.Difficulty{Levels: []int{1, 4}})
	if err != nil {
		t.Fatal(err)
	}
	if mix.DelegatingExpert == nil {
		t.Fatal("the mix lost the delegating expert")
	}
	d := env.Difficulty{Levels: []int{1, 4}}
	for seed := int64(0); seed < 6; seed++ {
		x := mix.DelegatingExpert(seed, 0, nil, "delegate")
		want := ItemsAt(d.LevelOf(seed))
		calls := 0
		for range 3 {
			a, err := x.Act(context.Background(), "")
			if err != nil {
				t.Fatal(err)
			}
			calls += strings.Count(a, `"name": "delegate"`)
		}
		if calls != want {
			t.Fatalf("seed %d: %d delegate calls at level %d (%d items)", seed, calls, d.LevelOf(seed), want)
		}
	}
}
