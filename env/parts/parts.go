// Package parts is the "parts" environment, a task that decomposes into independent parts: the
// total cost of several items, each of whose record (price, quantity, cost) must be looked up
// with the lookup tool (one long record per item); the calculator adds the costs up. The parts
// share nothing, so an agent may delegate each item's cost to a sub-agent (rollout's delegate
// tool) running in parallel, and the environment grades such sub-tasks itself
// (env.SubtaskGrader: a sub-task naming items of the task is right when the answer is their
// cost). Reward 1 for the exact total. Difficulty levels set the number of items, and so how
// much a single agent's context and turn count grow.
//
// It does not grade partial totals of the whole task. Its expert looks every item up itself (up
// to four lookups a turn), adds the costs with the calculator and answers; where the run
// delegates (Spec.DelegatingExpert), it hands each item to a sub-agent instead ("cost of
// ITEM"), whose expert looks the item up and answers its cost, and adds their answers.
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

// System is the instruction; WithTools appends the tools' descriptions.
const System = "Find the total cost (price times quantity, summed over the items). Look each item up, add the costs with the calculator. Reply: Answer: <number>"

var syllables = []string{"ka", "lo", "mi", "ru", "te", "vo", "zan", "pel", "dor", "qui"}

// names are the items' names: words a small vocabulary keeps whole, none inside another, so
// that naming an item is copying one or two tokens.
var names = []string{"bolt", "gear", "valve", "spring", "washer", "hinge", "rivet", "pulley", "clamp", "bracket", "nozzle", "gasket",
	"piston", "flange", "axle", "lever", "socket", "cable", "funnel", "spindle", "sprocket", "latch", "pipe", "chain"}

type item struct {
	name            string
	price, quantity int
	supplier        string
	warehouse       int
}

func (it item) record() string {
	return fmt.Sprintf("item %s: price %d, quantity %d, cost %d, supplier %s, warehouse W%d, notes: restocked monthly, fragile packaging, inspected on arrival", it.name, it.price, it.quantity, it.price*it.quantity, it.supplier, it.warehouse)
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
		name := names[rng.IntN(len(names))]
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

// New returns the environment at level (0: the default mix) with its lookup tool and the
// calculator, and a turn limit of one turn per item and two more.
func New(level int) env.Env {
	n := 4
	if level > 0 {
		n = ItemsAt(level)
	}
	e := &Env{level: level}
	calc, err := tool.NewCalculator(tool.CalcLimits{})
	if err != nil {
		panic(err) // the default limits are valid
	}
	return env.WithTurnLimit(env.WithTools(e, []tool.Tool{lookup{e}, calc}, env.ToolLimits{}), n+2)
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
		DelegatingExpert: func(seed int64, noise float64, rng *rand.Rand, tool string) env.DelegatingAgent {
			return &Expert{t: newTask(seed, level), noise: noise, rng: rng, delegate: tool}
		},
		Corpus: func(n int) []string { return corpus(level, n) },
	}
	if level > 0 {
		s.Description += fmt.Sprintf(" (level %d: %d items)", level, ItemsAt(level))
	}
	return s
}

// Expert looks the items up, up to four a turn, adds their costs with the calculator, then
// answers the total; with probability noise it slips the total. With a delegate tool's name it
// hands the items to sub-agents instead, up to four a turn ("cost of ITEM", Sub plays them),
// and adds their answers.
type Expert struct {
	t        task
	next     int
	added    bool
	noise    float64
	rng      *rand.Rand
	delegate string // the delegate tool's name, "" when it looks items up itself
}

// Act writes the next turn: lookups (or delegate calls) until every item is asked for, then the
// calculator's sum of the costs, then the answer.
func (x *Expert) Act(_ context.Context, obs string) (string, error) {
	if x.next < len(x.t.items) {
		var b strings.Builder
		for i := 0; i < tool.DefaultMaxCalls && x.next < len(x.t.items); i++ {
			name := x.t.items[x.next].name
			if x.delegate != "" {
				fmt.Fprintf(&b, `<tool_call>{"name": "%s", "arguments": {"task": "cost of %s"}}</tool_call>`, x.delegate, name)
			} else {
				fmt.Fprintf(&b, `<tool_call>{"name": "lookup", "arguments": {"item": "%s"}}</tool_call>`, name)
			}
			x.next++
		}
		return b.String(), nil
	}
	total := x.t.total()
	if !x.added {
		x.added = true
		costs := make([]string, len(x.t.items))
		for i, it := range x.t.items {
			costs[i] = strconv.Itoa(it.price * it.quantity)
		}
		return fmt.Sprintf(`<tool_call>{"name": "calculator", "arguments": {"expression": "%s"}}</tool_call>`, strings.Join(costs, "+")), nil
	}
	if x.noise > 0 && x.rng.Float64() < x.noise {
		total += 1 + x.rng.IntN(9)
	}
	return "Answer: " + strconv.Itoa(total), nil
}

// Sub returns the expert of a sub-task x delegated ("cost of ITEM"): it looks the item up and
// answers its cost. A sub-task naming no item of the task is an error.
func (x *Expert) Sub(subtask string) (env.Agent, error) {
	for _, it := range x.t.items {
		if strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(subtask), "cost of")) == it.name {
			return &subExpert{it: it}, nil
		}
	}
	return nil, fmt.Errorf("parts: the sub-task %q names no item of the task", truncate(subtask, 60))
}

// subExpert plays a sub-agent's "cost of ITEM": the lookup, then the cost alone.
type subExpert struct {
	it     item
	looked bool
}

func (s *subExpert) Act(_ context.Context, _ string) (string, error) {
	if !s.looked {
		s.looked = true
		return fmt.Sprintf(`<tool_call>{"name": "lookup", "arguments": {"item": "%s"}}</tool_call>`, s.it.name), nil
	}
	return strconv.Itoa(s.it.price * s.it.quantity), nil
}

func corpus(level int, n int) []string {
	return env.PlayedCorpus(System, n, 64, func(seed int64) (env.Env, env.Agent) {
		return New(level), &Expert{t: newTask(seed, level), noise: 0.3, rng: rand.New(rand.NewPCG(uint64(seed), 7))}
	})
}
