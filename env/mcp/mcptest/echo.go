// Package mcptest holds test-mcp-echo, an environment for tests of MCP tools: it asks for a word
// to be passed through an MCP server's echo tool, attached to it as ev_echo by the test's
// configuration (it has no tools of its own). Only tests import it.
package mcptest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"

	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/traj"
)

// echoEnv asks for a word to be passed through the MCP server's echo tool (attached as
// ev_echo by the configuration; the environment has no tools of its own) and rewards an answer
// that is exactly the tool's reply, "Echo: <word>".
type echoEnv struct {
	word        string
	reset, done bool
}

const echoSystem = "Pass the word through ev_echo, then reply with its result."

func (e *echoEnv) Reset(_ context.Context, seed int64) (env.Observation, error) {
	e.word, e.reset, e.done = fmt.Sprintf("w%d", seed), true, false
	return env.Observation{System: echoSystem, Text: "Word: " + e.word}, nil
}

func (e *echoEnv) Step(_ context.Context, action string) (env.Transition, error) {
	if !e.reset || e.done {
		return env.Transition{}, env.ErrEpisodeDone
	}
	e.done = true
	ok := strings.TrimSpace(action) == "Echo: "+e.word
	tr := env.Transition{Role: traj.RoleEnv, Done: true, Info: map[string]string{env.InfoSuccess: strconv.FormatBool(ok)}}
	if ok {
		tr.Reward = 1
	}
	return tr, nil
}

// EchoExpert is the environment's expert: it calls ev_echo with the word, then answers with the tool's reply.
type EchoExpert struct {
	Seed int64
	// OnAct, when set, runs on every action (a test's way to act mid-run).
	OnAct func()
	calls int
}

var toolResponseRE = regexp.MustCompile(`<tool_response>(.*?)</tool_response>`)

func (a *EchoExpert) Act(_ context.Context, obs string) (string, error) {
	if a.OnAct != nil {
		a.OnAct()
	}
	a.calls++
	if a.calls == 1 {
		return fmt.Sprintf(`<tool_call>{"name": "ev_echo", "arguments": {"message": "w%d"}}</tool_call>`, a.Seed), nil
	}
	if m := toolResponseRE.FindStringSubmatch(obs); m != nil {
		return m[1], nil
	}
	return "no reply", nil
}

// EchoSpec describes test-mcp-echo, for tests to add to their registry; onAct (may be nil) runs
// on every action of the expert.
func EchoSpec(onAct func()) env.Spec {
	return env.Spec{
		Name: "test-mcp-echo", Description: "pass a word through an MCP echo tool (MCP tests)",
		New:     func() (env.Env, error) { return env.WithTurnLimit(&echoEnv{}, 3), nil },
		Train:   env.SeedRange{Lo: 0, Hi: 1000},
		Heldout: env.SeedRange{Lo: 1000, Hi: 2000},
		Expert: func(seed int64, _ float64, _ *rand.Rand) env.Agent {
			return &EchoExpert{Seed: seed, OnAct: onAct}
		},
		Corpus: func(n int) []string {
			out := make([]string, n)
			for i := range out {
				out[i] = fmt.Sprintf("%s Word: w%d Echo: w%d", echoSystem, i, i)
			}
			return out
		},
	}
}
