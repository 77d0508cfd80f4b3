package bench

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"sync"
	"time"

	"github.com/agentrl/agentrl/infer"
	"github.com/agentrl/agentrl/infer/local"
	"github.com/agentrl/agentrl/model"
)

// engineSlots is the continuous batch of the engine benchmark.
const engineSlots = 32

// engineBench serves c.Engine rounds of engineSlots concurrent requests through local.Engine,
// each request filling a whole sequence (a Prompt-token prompt, then completion tokens up to the
// sequence length), and prints the Go heap and the resident set after each round. The KV cache
// is allocated once for all slots at full length and reused, so both should stay flat from the
// first round on. It runs before the other figures, so the peak resident memory it prints is the
// engine's own.
func (c *ModelOptions) engineBench(ctx context.Context, w io.Writer, cfg model.Config) error {
	m, err := model.New(cfg, c.Seed)
	if err != nil {
		return err
	}
	seqLen := c.EngLen
	if seqLen == 0 {
		seqLen = cfg.MaxSeq
	}
	if seqLen > cfg.MaxSeq || c.Prompt >= seqLen {
		return fmt.Errorf("bench model: engine sequences of %d tokens need room after a %d-token prompt and at most MaxSeq %d", seqLen, c.Prompt, cfg.MaxSeq)
	}
	eng, err := local.NewEngine(m, 1, local.EngineConfig{Slots: engineSlots, MaxLen: seqLen})
	if err != nil {
		return err
	}
	defer eng.Close()
	fmt.Fprintf(w, "engine: %d slots × %d tokens (prompt %d), %d rounds of %d concurrent requests\n",
		engineSlots, seqLen, c.Prompt, c.Engine, engineSlots)
	rng := rand.New(rand.NewPCG(c.Seed, 11))
	for round := range c.Engine {
		reqs := make([]infer.Request, engineSlots)
		for i := range reqs {
			prompt := make([]int32, c.Prompt)
			for j := range prompt {
				prompt[j] = int32(rng.IntN(cfg.Vocab))
			}
			reqs[i] = infer.Request{Prompt: prompt, MaxTokens: seqLen - c.Prompt,
				Sampling: infer.Sampling{Temperature: 1}, Seed: uint64(round*engineSlots + i)}
		}
		t0 := time.Now()
		tokens, err := serveAll(ctx, eng, reqs)
		if err != nil {
			return err
		}
		elapsed := time.Since(t0)
		runtime.GC() // the live heap, not the garbage the round left
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		rss, err := procStatus("VmRSS:")
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "  round %d: %d tokens in %.1f s (%.0f tokens/s); live heap %.1f MiB, heap from OS %.1f MiB, resident %.1f MiB\n",
			round+1, tokens, elapsed.Seconds(), float64(tokens)/elapsed.Seconds(),
			float64(ms.HeapInuse)/(1<<20), float64(ms.HeapSys)/(1<<20), float64(rss)/(1<<20))
	}
	if peak, err := peakRSS(); err == nil {
		fmt.Fprintf(w, "  peak resident memory of the process so far (VmHWM): %.1f MiB\n", float64(peak)/(1<<20))
	}
	return nil
}

// serveAll runs reqs concurrently and returns the completion tokens generated.
func serveAll(ctx context.Context, eng *local.Engine, reqs []infer.Request) (int, error) {
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex // protects tokens and first
		tokens int
		first  error
	)
	for _, req := range reqs {
		wg.Go(func() {
			comp, err := eng.Generate(ctx, req)
			mu.Lock()
			defer mu.Unlock()
			tokens += len(comp.Tokens)
			if err != nil && first == nil {
				first = err
			}
		})
	}
	wg.Wait()
	return tokens, first
}
