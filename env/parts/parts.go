// Package parts is the "parts" environment, a task that decomposes into independent parts: the
// total cost of several items, each of whose price and quantity must be looked up with the
// lookup tool (one long record per item). The parts share nothing, so an agent may delegate
// each item's cost to a sub-agent (rollout's delegate tool) running in parallel, and the
// environment grades such sub-tasks itself (env.SubtaskGrader: a sub-task naming items of the
// task is right when the answer is their cost). Reward 1 for the exact total. Difficulty levels
// set the number of items, and so how much a single agent's context and turn count grow.
//
// It does not grade partial totals of the whole task; its expert looks every item up itself
// (up to four lookups a turn) and never delegates.
package parts

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"math/rand/v2"
	"strconv"
	"strings"

	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/reward"
	"github.com/agentrl/agentrl/tool"
	"github.com/agentrl/agentrl/traj"
)

// Name is the registry name.
const Name = "parts"

var (
	trainSeeds   = env.SeedRange{Lo: 0, Hi: 1 << 40}
	heldoutSeeds = env.SeedRange{Lo: 1 << 40, Hi: 1<<40 + 1<<20}
)

// Levels are the difficulty levels: level l has ItemsAt(l) items.
var Levels = []int{1, 2, 3, 4}

// ItemsAt is the number of items at level l (the default tasks mix 2 to 4).
func ItemsAt(l int) int { return []int{0, 2, 3, 5, 8}[l] }

// System is the instruction; WithTools appends the lookup tool's description.
const System = "Find the total cost (price times quantity, summed over the items). Look each item up. Reply: Answer: <number>"

var syllables = []string{"ka", "lo", "mi", "ru", "te", "vo", "zan", "pel", "dor", "qui"}

type item struct {
	name            string
	price, quantity int
	supplier        string
	warehouse       int
}

func (it item) record() string {
	return fmt.Sprintf("item %s: price %d, quantity %d, supplier %s, warehouse W%d, notes: restocked monthly, fragile packaging, inspected on arrival", it.name, it.price, it.quantity, it.supplier, it.warehouse)
}

type task struct{ items []item }

func newTask(seed int64, level int) task {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x9a275))
	n := 2 + rng.IntN(3)
	if level > 0 {
		n = ItemsAt(level)
	}
	var t task
	seen := map[string]bool{}
	for len(t.items) < n {
		name := syllables[rng.IntN(len(syllables))] + syllables[rng.IntN(len(syllables))] + syllables[rng.IntN(len(syllables))]
		if seen[name] {
			continue
		}
		seen[name] = true
		t.items = append(t.items, item{name: name, price: 2 + rng.IntN(98), quantity: 1 + rng.IntN(30),
			supplier: syllables[rng.IntN(len(syllables))] + "corp", warehouse: 1 + rng.IntN(40)})
	}
	return t
}

func (t task) names() []string {
	out := make([]string, len(t.items))
	for i, it := range t.items {
		out[i] = it.name
	}
	return out
}

func (t task) total() int {
	s := 0
	for _, it := range t.items {
		s += it.price * it.quantity
	}
	return s
}

func (t task) question() string {
	return "Items: " + strings.Join(t.names(), ", ")
}

// Env is one episode: Reset poses the items, a reply without a tool call is the answer.
type Env struct {
	level       int
	t           task
	reset, done bool
}

// New returns the environment at level (0: the default mix) with its lookup tool and a turn
// limit of one turn per item and two more.
func New(level int) env.Env {
	n := 4
	if level > 0 {
		n = ItemsAt(level)
	}
	e := &Env{level: level}
	return env.WithTurnLimit(env.WithTools(e, []tool.Tool{lookup{e}}, env.ToolLimits{}), n+2)
}

func (e *Env) Reset(_ context.Context, seed int64) (env.Observation, error) {
	e.t = newTask(seed, e.level)
	e.reset, e.done = true, false
	return env.Observation{System: System, Text: e.t.question()}, nil
}

func (e *Env) Step(_ context.Context, action string) (env.Transition, error) {
	switch {
	case !e.reset:
		return env.Transition{}, env.ErrNotReset
	case e.done:
		return env.Transition{}, env.ErrEpisodeDone
	}
	e.done = true
	score := reward.ExactNumber{}.Against(big.NewRat(int64(e.t.total()), 1), action)
	return env.Transition{Role: traj.RoleEnv, Reward: score, Done: true,
		Info: map[string]string{env.InfoSuccess: strconv.FormatBool(reward.Solved(score)), "answer": strconv.Itoa(e.t.total())}}, nil
}

// GradeSubtask grades a sub-task that names items of the current task: the answer is right
// when its last number is their total cost. A sub-task naming none is not this environment's.
func (e *Env) GradeSubtask(subtask, answer string) (float64, bool) {
	if !e.reset {
		return 0, false
	}
	sum, named := 0, 0
	for _, it := range e.t.items {
		if strings.Contains(subtask, it.name) {
			sum += it.price * it.quantity
			named++
		}
	}
	if named == 0 {
		return 0, false
	}
	return reward.ExactNumber{}.Against(big.NewRat(int64(sum), 1), answer), true
}

// lookup returns an item's record.
type lookup struct{ e *Env }

func (lookup) Name() string        { return "lookup" }
func (lookup) Description() string { return "the record of an item: price, quantity, supplier" }
func (lookup) Schema() json.RawMessage {
	return json.RawMessage(`{"type":"object","properties":{"item":{"type":"string"}},"required":["item"]}`)
}

func (l lookup) Call(_ context.Context, args json.RawMessage) (string, error) {
	var a struct {
		Item string `json:"item"`
	}
	if err := json.Unmarshal(args, &a); err != nil {
		return "", fmt.Errorf("arguments must be {\"item\": \"<name>\"}: %v", err)
	}
	if !l.e.reset {
		return "", errors.New("no task")
	}
	for _, it := range l.e.t.items {
		if it.name == strings.TrimSpace(a.Item) {
			return it.record(), nil
		}
	}
	return "", fmt.Errorf("no item %q", truncate(a.Item, 40))
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
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
		Description: "total cost of several items, each looked up with a tool (independent parts a sub-agent can take); reward 1 for the exact total",
		New:         func() (env.Env, error) { return New(level), nil },
		Train:       trainSeeds,
		Heldout:     heldoutSeeds,
		Expert: func(seed int64, noise float64, rng *rand.Rand) env.Agent {
			return &Expert{t: newTask(seed, level), noise: noise, rng: rng}
		},
		Corpus: func(n int) []string { return corpus(level, n) },
	}
	if level > 0 {
		s.Description += fmt.Sprintf(" (level %d: %d items)", level, ItemsAt(level))
	}
	return s
}

// Expert looks the items up, up to four a turn, then answers the total; with probability noise
// it slips the total.
type Expert struct {
	t     task
	next  int
	noise float64
	rng   *rand.Rand
}

// Act writes the next turn's lookups, or the answer once every item is looked up.
func (x *Expert) Act(_ context.Context, _ string) (string, error) {
	if x.next < len(x.t.items) {
		var b strings.Builder
		for i := 0; i < tool.DefaultMaxCalls && x.next < len(x.t.items); i++ {
			fmt.Fprintf(&b, `<tool_call>{"name": "lookup", "arguments": {"item": "%s"}}</tool_call>`, x.t.items[x.next].name)
			x.next++
		}
		return b.String(), nil
	}
	total := x.t.total()
	if x.noise > 0 && x.rng.Float64() < x.noise {
		total += 1 + x.rng.IntN(9)
	}
	return "Answer: " + strconv.Itoa(total), nil
}

func corpus(level int, n int) []string {
	return env.PlayedCorpus(System, n, 64, func(seed int64) (env.Env, env.Agent) {
		return New(level), &Expert{t: newTask(seed, level), noise: 0.3, rng: rand.New(rand.NewPCG(uint64(seed), 7))}
	})
}
