package bench

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/infer"
	"github.com/agentrl/agentrl/rollout"
	"github.com/agentrl/agentrl/tokenizer"
	"github.com/agentrl/agentrl/traj"
)

// MemoryResult is the memory held while n episodes are all in flight at once.
type MemoryResult struct {
	Episodes      int
	TokensEach    int    // tokens in each episode's trajectory when measured
	HeapBytes     uint64 // heap in use (live objects) above the idle baseline
	StackBytes    uint64 // goroutine stacks above the idle baseline
	PerEpisode    float64
	TotalInFlight uint64
}

// padEnv answers every action with a short tool-like observation and never ends the episode by
// itself; the turn limit of the benchmark's generator decides the length.
type padEnv struct{ turn int }

func (e *padEnv) Reset(ctx context.Context, seed int64) (env.Observation, error) {
	e.turn = 0
	return env.Observation{System: "Act.", Text: fmt.Sprintf("task %d", seed)}, nil
}

func (e *padEnv) Step(ctx context.Context, action string) (env.Transition, error) {
	e.turn++
	return env.Transition{Observation: fmt.Sprintf("<tool_response>%d</tool_response>", e.turn), Role: traj.RoleTool}, nil
}

// padGen produces completions of a fixed length; on the turn that brings the episode to its
// target length it waits at a barrier until every episode is there, so that they are all in
// flight when memory is read.
type padGen struct {
	tok     *tokenizer.Tokenizer
	perTurn int
	target  int
	arrived *atomic.Int64
	release chan struct{}
}

func (g *padGen) Generate(ctx context.Context, req infer.Request) (infer.Completion, error) {
	n := min(g.perTurn, req.MaxTokens)
	c := infer.Completion{Tokens: make([]int32, n), Logprobs: make([]float32, n), Versions: make([]int32, n), Finish: infer.FinishStop}
	for i := range c.Tokens {
		c.Tokens[i] = int32(10 + i%200)
		c.Logprobs[i] = -1
	}
	c.Tokens[n-1] = g.tok.EndOfTurn()
	if len(req.Prompt)+n >= g.target {
		g.arrived.Add(1)
		select {
		case <-g.release:
		case <-ctx.Done():
			return infer.Completion{}, ctx.Err()
		}
		// One more completion that does not end the turn truncates the episode right here.
		c.Finish = infer.FinishLength
		c.Tokens[n-1] = 10
	}
	return c, nil
}

// Memory holds n episodes of about tokens tokens each in flight and reports the memory they use.
func Memory(ctx context.Context, tok *tokenizer.Tokenizer, n, tokens int) (MemoryResult, error) {
	var arrived atomic.Int64
	release := make(chan struct{})
	gen := &padGen{tok: tok, perTurn: 240, target: tokens, arrived: &arrived, release: release}
	cfg := rollout.Config{MaxTurns: 64, MaxContext: tokens + 256, MaxTokensPerTurn: 256, Sampling: infer.Sampling{Temperature: 1}}
	runner := &rollout.Runner{Gen: gen, Tok: tok, Cfg: cfg}
	ts := make([]rollout.Task, n)
	for i := range ts {
		ts[i] = rollout.Task{Env: "pad", Seed: int64(i), GroupID: uint64(i)}
	}
	base := readMem()
	var wg sync.WaitGroup
	var groups []rollout.Group
	var runErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		groups, runErr = runner.RunGroups(ctx, func(string) (env.Env, error) { return &padEnv{}, nil }, ts, 1, n)
	}()
	for arrived.Load() < int64(n) {
		if ctx.Err() != nil {
			break
		}
		runtime.Gosched()
	}
	peak := readMem()
	close(release)
	wg.Wait()
	if runErr != nil {
		return MemoryResult{}, runErr
	}
	res := MemoryResult{Episodes: n}
	if len(groups) > 0 {
		res.TokensEach = groups[0].Trajs[0].Len()
	}
	res.HeapBytes = peak.heap - min(base.heap, peak.heap)
	res.StackBytes = peak.stack - min(base.stack, peak.stack)
	res.TotalInFlight = res.HeapBytes + res.StackBytes
	res.PerEpisode = float64(res.TotalInFlight) / float64(n)
	return res, nil
}

type mem struct{ heap, stack uint64 }

func readMem() mem {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return mem{heap: ms.HeapAlloc, stack: ms.StackInuse}
}
