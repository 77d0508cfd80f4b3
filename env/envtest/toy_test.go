package envtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/tool"
	"github.com/agentrl/agentrl/traj"
)

// The toy task: "Shout W." — the answer is W upper-cased, which the `upper` tool computes.
// It exists to exercise the suite; flaw selects a deliberate contract violation.
var words = []string{"apple", "river", "stone", "cloud", "ember", "maple", "quartz", "violet"}

type toyEnv struct {
	flaw        string
	word        string
	reset, done bool
	calls       int // how many episodes this instance has seen (the "nondeterministic" flaw uses it)
}

func (e *toyEnv) Reset(_ context.Context, seed int64) (env.Observation, error) {
	rng := rand.New(rand.NewPCG(uint64(seed), 1))
	e.word = words[rng.IntN(len(words))] + fmt.Sprint(rng.IntN(1000))
	e.reset, e.done = true, false
	e.calls++
	text := "Shout " + e.word + "."
	if e.flaw == "nondeterministic" && e.calls%2 == 0 {
		text += " Now!"
	}
	return env.Observation{System: "Reply with the word in capitals.", Text: text}, nil
}

func (e *toyEnv) Step(_ context.Context, action string) (env.Transition, error) {
	if !e.reset {
		return env.Transition{}, env.ErrNotReset
	}
	if e.done {
		return env.Transition{}, env.ErrEpisodeDone
	}
	if e.flaw == "panic" && strings.ContainsRune(action, 0) {
		panic("toy: NUL byte")
	}
	if e.flaw == "error-on-garbage" && !strings.Contains(action, "Answer") {
		return env.Transition{}, errors.New("toy: cannot read that")
	}
	if e.flaw == "leak" {
		go func() { select {} }()
	}
	e.done = true
	ok := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(action), "Answer:")) == strings.ToUpper(e.word)
	r := 0.0
	if ok {
		r = 1
	}
	if e.flaw == "nan" {
		r = r / r * 0
	}
	role := traj.RoleEnv
	if e.flaw == "bad-role" {
		role = traj.RoleAssistant
	}
	return env.Transition{Role: role, Reward: r, Done: true, Info: map[string]string{env.InfoSuccess: fmt.Sprint(ok)}}, nil
}

type upperTool struct{}

func (upperTool) Name() string        { return "upper" }
func (upperTool) Description() string { return "upper-cases text" }
func (upperTool) Schema() json.RawMessage {
	return json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`)
}
func (upperTool) Call(ctx context.Context, args json.RawMessage) (string, error) {
	var a struct {
		Text *string `json:"text"`
	}
	if err := json.Unmarshal(args, &a); err != nil || a.Text == nil {
		return "", errors.New(`want {"text": string}`)
	}
	return strings.ToUpper(*a.Text), nil
}

// toyExpert calls the tool, then answers with its result; with probability noise it answers in
// lower case without the tool.
type toyExpert struct {
	word   string
	sloppy bool
	turn   int
}

func (x *toyExpert) Act(_ context.Context, obs string) (string, error) {
	x.turn++
	if x.sloppy {
		return "Answer: " + x.word, nil
	}
	if x.turn == 1 {
		return fmt.Sprintf(`<tool_call>{"name": "upper", "arguments": {"text": %q}}</tool_call>`, x.word), nil
	}
	res := strings.TrimSuffix(strings.TrimPrefix(obs, "<tool_response>"), "</tool_response>")
	return "Answer: " + res, nil
}

func toySpec(flaw string) env.Spec {
	return env.Spec{
		Name:    "toy-" + flaw,
		Train:   env.SeedRange{Lo: 0, Hi: 1000},
		Heldout: env.SeedRange{Lo: 1000, Hi: 1100},
		New: func() (env.Env, error) {
			var e env.Env = &toyEnv{flaw: flaw}
			e = env.WithTools(e, []tool.Tool{upperTool{}}, env.ToolLimits{CallTimeout: time.Minute})
			if flaw != "no-turn-limit" {
				e = env.WithTurnLimit(e, 4)
			}
			return e, nil
		},
		Expert: func(seed int64, noise float64, rng *rand.Rand) env.Agent {
			t := &toyEnv{}
			obs, _ := t.Reset(context.Background(), seed)
			word := strings.TrimSuffix(strings.TrimPrefix(obs.Text, "Shout "), ".")
			return &toyExpert{word: word, sloppy: flaw != "noise-ignored" && rng.Float64() < noise}
		},
		Corpus: func(n int) []string {
			out := make([]string, n)
			for i := range out {
				out[i] = "Shout " + words[i%len(words)] + "."
			}
			return out
		},
	}
}
