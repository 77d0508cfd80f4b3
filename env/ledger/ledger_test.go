package ledger

import (
	"context"
	"strings"
	"testing"

	"github.com/agentrl/agentrl/env/envtest"
)

func TestSuite(t *testing.T) { envtest.Run(t, Spec()) }

// The pages grow with the level, and the balance is what the entries of the account add to.
func TestLevelsGrowTheHistory(t *testing.T) {
	prev := 0
	for _, l := range Levels {
		tk := newTask(5, l)
		n := len(tk.question())
		for _, p := range tk.pages[1:] {
			n += len(p)
		}
		if len(tk.pages) != PagesAt(l) || n <= 2*prev-100 {
			t.Fatalf("level %d: %d pages, %d bytes of history (level before: %d)", l, len(tk.pages), n, prev)
		}
		prev = n
	}
	if prev < 4000 { // a byte-level BPE of 512 tokens takes 2-4 bytes a token
		t.Fatalf("the top level's history is %d bytes: it should not fit a 512-token context", prev)
	}
	e := New(2)
	obs, err := e.Reset(context.Background(), 9)
	if err != nil || !strings.Contains(obs.Text, "4 pages") {
		t.Fatalf("reset: %v %q", err, obs.Text)
	}
	for range 4 {
		tr, err := e.Step(context.Background(), "next")
		if err != nil || tr.Done {
			t.Fatal(err, tr)
		}
	}
	tr, _ := e.Step(context.Background(), "next")
	if !strings.Contains(tr.Observation, "No more pages") {
		t.Fatalf("after the last page: %q", tr.Observation)
	}
	tk := newTask(9, 2)
	tr, _ = e.Step(context.Background(), "Answer: "+itoa(tk.balance))
	if !tr.Done || tr.Reward != 1 {
		t.Fatalf("the right balance scored %v", tr.Reward)
	}
}

func itoa(n int) string {
	s := ""
	neg := n < 0
	if neg {
		n = -n
	}
	for {
		s = string(rune('0'+n%10)) + s
		n /= 10
		if n == 0 {
			break
		}
	}
	if neg {
		s = "-" + s
	}
	return s
}
