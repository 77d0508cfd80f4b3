package envtest_test

// This file is the worked example of CONTRIBUTING.md's recipes "A new environment" and "A new
// tool", step by step in their words: a tool (reverse) and an environment (mirror) that uses it,
// checked by the shared suite. A real environment lives in its own package env/<name>, split
// into env.go, expert.go, corpus.go and spec.go as env/calc is.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/env/envtest"
	"github.com/agentrl/agentrl/reward"
	"github.com/agentrl/agentrl/tool"
	"github.com/agentrl/agentrl/traj"
)

// --- A new tool -------------------------------------------------------------------------------

// reverseTool writes a text backwards. Recipe step 1: implement tool.Tool.
type reverseTool struct{}

func (reverseTool) Name() string        { return "reverse" }
func (reverseTool) Description() string { return "writes text backwards, character by character" }
func (reverseTool) Schema() json.RawMessage {
	return json.RawMessage(`{"type":"object","properties":{"text":{"type":"string","maxLength":256}},"required":["text"],"additionalProperties":false}`)
}

// maxReverse bounds the argument (recipe step 2: validate and bound the arguments).
const maxReverse = 256

// Call runs the tool. Bad arguments are an error, which the model sees as an observation
// (recipe step 3); it has no infrastructure to fail, so it never returns tool.ErrInfra.
func (reverseTool) Call(ctx context.Context, args json.RawMessage) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	var a struct {
		Text *string `json:"text"`
	}
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&a); err != nil {
		return "", fmt.Errorf("reverse: arguments: %v", err)
	}
	switch {
	case a.Text == nil:
		return "", errors.New(`reverse: missing "text"`)
	case len(*a.Text) > maxReverse:
		return "", fmt.Errorf("reverse: text longer than %d bytes", maxReverse)
	case !utf8.ValidString(*a.Text):
		return "", errors.New("reverse: text is not UTF-8")
	}
	r := []rune(*a.Text)
	for i, j := 0, len(r)-1; i < j; i, j = i+1, j-1 {
		r[i], r[j] = r[j], r[i]
	}
	return string(r), nil
}

// Recipe step 4: a table test of the tool's answers and errors (and, for a real parser, a Fuzz
// function).
func TestReverseTool(t *testing.T) {
	for _, c := range []struct {
		args, want string
		ok         bool
	}{
		{`{"text":"stone"}`, "enots", true},
		{`{"text":""}`, "", true},
		{`{"text":"ÿes"}`, "seÿ", true},
		{`{}`, "", false},
		{`{"text":7}`, "", false},
		{`{"text":"a","extra":1}`, "", false},
		{`not json`, "", false},
		{`{"text":"` + strings.Repeat("x", maxReverse+1) + `"}`, "", false},
	} {
		got, err := reverseTool{}.Call(context.Background(), json.RawMessage(c.args))
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("Call(%s) = %q, %v; want %q, ok=%v", c.args, got, err, c.want, c.ok)
		}
	}
}

// --- A new environment ------------------------------------------------------------------------

// Recipe step 1: the task, a type with Reset and Step.

const (
	mirrorSystem   = "Use the reverse tool, then reply: Answer: <word>"
	mirrorMaxTurns = 4 // the expert needs two turns (call, answer); two more allow a retry
	mirrorSalt     = 0x6d6972726f72
)

// mirror asks for a made-up word written backwards.
type mirror struct {
	word        string
	reset, done bool
}

// Reset derives the whole task from seed alone, with its own generator.
func (m *mirror) Reset(_ context.Context, seed int64) (env.Observation, error) {
	m.word = mirrorWord(seed)
	m.reset, m.done = true, false
	return env.Observation{System: mirrorSystem, Text: "Write " + m.word + " backwards."}, nil
}

func mirrorWord(seed int64) string {
	rng := rand.New(rand.NewPCG(uint64(seed), mirrorSalt))
	b := make([]byte, 5+rng.IntN(4))
	for i := range b {
		b[i] = byte('a' + rng.IntN(26))
	}
	return string(b)
}

// grade reads the answer line with a reward verifier: case, punctuation and spacing ignored.
var grade = reward.ExactMatch{Extract: func(action string) (string, bool) {
	_, ans, ok := strings.Cut(action, "Answer:")
	return ans, ok
}}

// Step grades the action as the answer and ends the episode. A wrong or garbled answer is an
// ordinary transition with reward 0; only a broken environment returns an error.
func (m *mirror) Step(_ context.Context, action string) (env.Transition, error) {
	switch {
	case !m.reset:
		return env.Transition{}, env.ErrNotReset
	case m.done:
		return env.Transition{}, env.ErrEpisodeDone
	}
	m.done = true
	want := []rune(m.word)
	for i, j := 0, len(want)-1; i < j; i, j = i+1, j-1 {
		want[i], want[j] = want[j], want[i]
	}
	score, err := grade.Score(context.Background(), reward.Sample{Response: action, Answer: string(want)})
	if err != nil {
		return env.Transition{}, err
	}
	return env.Transition{Role: traj.RoleEnv, Reward: score, Done: true,
		Info: map[string]string{env.InfoSuccess: fmt.Sprint(score == 1)}}, nil
}

// Recipe step 2: New attaches the tools and the turn limit.
func newMirror() (env.Env, error) {
	return env.WithTurnLimit(env.WithTools(&mirror{}, []tool.Tool{reverseTool{}}, env.ToolLimits{}), mirrorMaxTurns), nil
}

// Recipe step 3: the expert. It calls the tool and copies its answer; with probability noise,
// drawn from rng alone, it skips the tool and writes the word forwards.
type mirrorExpert struct {
	word  string
	lazy  bool
	turns int
}

func mirrorExpertFor(seed int64, noise float64, rng *rand.Rand) env.Agent {
	return &mirrorExpert{word: mirrorWord(seed), lazy: rng.Float64() < noise}
}

func (x *mirrorExpert) Act(_ context.Context, obs string) (string, error) {
	x.turns++
	if x.lazy {
		return "Answer: " + x.word, nil
	}
	if x.turns == 1 {
		call, _ := json.Marshal(map[string]any{"name": "reverse", "arguments": map[string]string{"text": x.word}})
		return tool.OpenTag + string(call) + tool.CloseTag, nil
	}
	res, _, _ := strings.Cut(strings.TrimPrefix(obs, "<tool_response>"), "</tool_response>")
	return "Answer: " + res, nil
}

// Recipe step 4: the corpus, n episodes of the noisy expert rendered as text, deterministic.
func mirrorCorpus(n int) []string {
	e, _ := newMirror()
	out := make([]string, 0, n)
	for i := range n {
		seed := int64(i)
		ep, err := env.Play(context.Background(), e, mirrorExpertFor(seed, 0.3, rand.New(rand.NewPCG(uint64(seed), 1))), seed, mirrorMaxTurns)
		if err != nil {
			return out
		}
		var b strings.Builder
		b.WriteString(ep.Start.System + "\n" + ep.Start.Text + "\n")
		for _, st := range ep.Steps {
			b.WriteString(st.Action + "\n" + st.Transition.Observation + "\n")
		}
		out = append(out, b.String())
	}
	return out
}

// Recipe step 5: the Spec, with disjoint train and held-out seed ranges.
func mirrorSpec() env.Spec {
	return env.Spec{
		Name:        "mirror",
		Description: "write a made-up word backwards with the reverse tool; reward 1 for the exact answer",
		New:         newMirror,
		Train:       env.SeedRange{Lo: 0, Hi: 1_000_000},
		Heldout:     env.SeedRange{Lo: 1_000_000, Hi: 1_001_000},
		Expert:      mirrorExpertFor,
		Corpus:      mirrorCorpus,
	}
}

// Recipe step 6: the shared suite.
func TestMirrorSuite(t *testing.T) {
	envtest.Run(t, mirrorSpec())
}

// Recipe step 7: a registry holds it by name (a built-in goes into env/all's Builtins).
func TestMirrorRegisters(t *testing.T) {
	r := env.NewRegistry()
	if err := r.Register(mirrorSpec()); err != nil {
		t.Fatal(err)
	}
	e, err := r.New("mirror")
	if err != nil {
		t.Fatal(err)
	}
	ep, err := env.Play(context.Background(), e, mirrorExpertFor(1_000_000, 0, rand.New(rand.NewPCG(1, 1))), 1_000_000, mirrorMaxTurns)
	if err != nil || !ep.Success || len(ep.Steps) != 2 {
		t.Fatalf("expert episode: %+v, %v; want success in two steps", ep, err)
	}
}
