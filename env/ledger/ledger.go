// Package ledger is the "ledger" environment, a long-context task: the agent tracks one account
// through a ledger shown a page at a time (each action other than an answer turns the page) and,
// after the last page, replies with the account's final balance; reward 1 for the exact number.
// The ledger is the account's statement: each page closes with the account's balance after it
// ("ACCOUNT balance N", on the last page "ACCOUNT closing balance N"), so the answer is the last
// balance read: a copy a small model can learn, not a running sum over the entries. What an
// agent must carry from page to page is small; what it must not do is keep every page.
// Every page holds entries of several accounts, so the history is mostly noise, and at the higher
// difficulty levels (more pages) the whole history does not fit a small model's context: an
// agent that keeps it all is truncated, one that folds its context into a running balance
// (rollout's context folding) can finish. The observations are long by design.
//
// There are no tools. It does not grade partial progress. Its expert (which regenerates the
// ledger from the seed) keeps the whole history, and folds it into the last balance read when
// the rollout scaffold asks for a summary (rollout.context's threshold trigger).
package ledger

import (
	"context"
	"fmt"
	"math/big"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"

	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/reward"
	"github.com/agentrl/agentrl/traj"
)

// Name is the registry name.
const Name = "ledger"

// Seed ranges: disjoint; every seed is a different ledger.
var (
	trainSeeds   = env.SeedRange{Lo: 0, Hi: 1 << 40}
	heldoutSeeds = env.SeedRange{Lo: 1 << 40, Hi: 1<<40 + 1<<20}
)

// Levels are the difficulty levels: level l has PagesAt(l) pages.
var Levels = []int{1, 2, 3, 4}

// PagesAt is the number of pages at level l (the default tasks mix 2 to 6 pages).
func PagesAt(l int) int { return 1 << l }

// EntriesPerPage is the number of entries on one page.
const EntriesPerPage = 8

// System is the instruction.
const System = "Track one account through a ledger shown a page at a time. Reply next to turn the page. After the last page reply: Answer: <final balance>"

var accounts = []string{"amber", "birch", "cedar", "delta", "ember"}

// task is one ledger: the account to track, its opening balance, and the pages.
type task struct {
	account string
	opening int
	pages   []string
	after   []int // the balance after each page
	balance int
}

// newTask generates the ledger of seed at level (0: 2 to 6 pages).
func newTask(seed int64, level int) task {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x1ed6e7))
	n := 2 + rng.IntN(5)
	if level > 0 {
		n = PagesAt(level)
	}
	t := task{account: accounts[rng.IntN(len(accounts))], opening: 10 * (1 + rng.IntN(9))}
	t.balance = t.opening
	day := 1
	for p := range n {
		var b strings.Builder
		fmt.Fprintf(&b, "Page %d of %d:", p+1, n)
		for range EntriesPerPage {
			acct := accounts[rng.IntN(len(accounts))]
			amt := 1 + rng.IntN(20)
			verb := "deposit"
			if rng.IntN(3) == 0 {
				verb, amt = "withdraw", -amt
			}
			if acct == t.account {
				t.balance += amt
			}
			fmt.Fprintf(&b, "\nday %d: %s %s %d (ref %d)", day, acct, verb, abs(amt), 1000+rng.IntN(9000))
			day += rng.IntN(3)
		}
		b.WriteString("\n" + t.footer(p, n))
		t.pages = append(t.pages, b.String())
		t.after = append(t.after, t.balance)
	}
	return t
}

// footer is the line that closes page p of n: the account's balance after it.
func (t task) footer(p, n int) string {
	if p == n-1 {
		return fmt.Sprintf("%s closing balance %d", t.account, t.balance)
	}
	return fmt.Sprintf("%s balance %d", t.account, t.balance)
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

func (t task) question() string {
	return fmt.Sprintf("Account %s opens with balance %d. The ledger has %d pages: reply next to read page 1.", t.account, t.opening, len(t.pages))
}

// Env is one ledger episode.
type Env struct {
	level       int
	t           task
	page        int // pages shown
	reset, done bool
}

// New returns the environment at level (0: the default mix), with a turn limit of one turn per
// page and three more.
func New(level int) env.Env {
	maxPages := 6
	if level > 0 {
		maxPages = PagesAt(level)
	}
	return env.WithTurnLimit(&Env{level: level}, maxPages+3)
}

// Reset poses the ledger of seed: the account, its opening balance and the number of pages.
func (e *Env) Reset(_ context.Context, seed int64) (env.Observation, error) {
	e.t = newTask(seed, e.level)
	e.page, e.reset, e.done = 0, true, false
	return env.Observation{System: System, Text: e.t.question()}, nil
}

// Step grades an action that contains "Answer" and ends the episode; any other action turns the
// page (after the last page it is told to answer).
func (e *Env) Step(_ context.Context, action string) (env.Transition, error) {
	switch {
	case !e.reset:
		return env.Transition{}, env.ErrNotReset
	case e.done:
		return env.Transition{}, env.ErrEpisodeDone
	}
	if strings.Contains(action, "Answer") {
		e.done = true
		score := reward.ExactNumber{}.Against(big.NewRat(int64(e.t.balance), 1), action)
		return env.Transition{Role: traj.RoleEnv, Reward: score, Done: true,
			Info: map[string]string{env.InfoSuccess: strconv.FormatBool(reward.Solved(score)), "answer": strconv.Itoa(e.t.balance)}}, nil
	}
	if e.page >= len(e.t.pages) {
		return env.Transition{Role: traj.RoleEnv, Observation: "No more pages. Reply: Answer: <final balance of " + e.t.account + ">"}, nil
	}
	e.page++
	return env.Transition{Role: traj.RoleEnv, Observation: e.t.pages[e.page-1]}, nil
}

// Spec describes the environment for an env.Registry.
func Spec() env.Spec {
	s := specAt(0)
	s.Levels = Levels
	s.AtLevel = specAt
	return s
}

func specAt(level int) env.Spec {
	s := env.Spec{
		Name:        Name,
		Description: "track one account's balance through a long ledger shown a page at a time (long observations, long horizon); reward 1 for the exact final balance",
		New:         func() (env.Env, error) { return New(level), nil },
		Train:       trainSeeds,
		Heldout:     heldoutSeeds,
		Expert: func(seed int64, noise float64, rng *rand.Rand) env.Agent {
			return &Expert{t: newTask(seed, level), noise: noise, rng: rng}
		},
		Corpus: func(n int) []string { return corpus(level, n) },
	}
	if level > 0 {
		s.Description += fmt.Sprintf(" (level %d: %d pages)", level, PagesAt(level))
	}
	return s
}

// Expert reads every page, then answers the final balance; with probability noise it answers a
// page early or slips the number. Asked by the rollout scaffold for a summary (context
// folding's threshold trigger), it folds with the last page's closing line, word for word
// ("ACCOUNT balance N", or "ACCOUNT closing balance N" after the last page), so the last
// balance in the context is always the answer so far, and "closing" says the ledger is read.
type Expert struct {
	t      task
	seen   int
	folded int // x.seen when it last folded
	noise  float64
	rng    *rand.Rand
}

var foldRequest = regexp.MustCompile(`call ([A-Za-z_][A-Za-z0-9_.-]*) with a summary`)

// Act turns the page until the last one, then answers; asked for a summary, it folds.
func (x *Expert) Act(_ context.Context, obs string) (string, error) {
	// x.seen acts so far turned x.seen pages (the last ones may have found no page left).
	if m := foldRequest.FindStringSubmatch(obs); m != nil && x.seen > 0 && x.folded < x.seen {
		page := min(x.seen, len(x.t.pages))
		x.folded = x.seen
		return fmt.Sprintf(`<tool_call>{"name": "%s", "arguments": {"summary": "%s"}}</tool_call>`,
			m[1], lastLine(x.t.pages[page-1])), nil
	}
	x.seen++
	if x.seen <= len(x.t.pages) && !(x.noise > 0 && x.rng.Float64() < x.noise/4) {
		return "next", nil
	}
	b := x.t.balance
	if x.noise > 0 && x.rng.Float64() < x.noise {
		b += 1 + x.rng.IntN(9)
	}
	return "Answer: " + strconv.Itoa(b), nil
}

func lastLine(s string) string { return s[strings.LastIndexByte(s, '\n')+1:] }

// corpus is n samples of the text of level's episodes played by the expert at noise 0.3.
func corpus(level int, n int) []string {
	return env.PlayedCorpus(System, n, 64, func(seed int64) (env.Env, env.Agent) {
		return &Env{level: level}, &Expert{t: newTask(seed, level), noise: 0.3, rng: rand.New(rand.NewPCG(uint64(seed), 7))}
	})
}
