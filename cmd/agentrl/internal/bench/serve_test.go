package bench

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentrl/agentrl/checkpoint"
	"github.com/agentrl/agentrl/env/all"
	"github.com/agentrl/agentrl/infer"
	"github.com/agentrl/agentrl/infer/local"
	"github.com/agentrl/agentrl/infer/remote"
	"github.com/agentrl/agentrl/model"
)

// A small `agentrl bench serve` prints every part: the overhead table at each level, the balance
// and the publish latency.
func TestServeBench(t *testing.T) {
	var out bytes.Buffer
	err := Serve(context.Background(), &out, ServeOptions{Registry: all.Builtins(), Concurrency: "1,4", Requests: 8, Repeat: 2,
		Prompt: 8, Tokens: 8, Slots: 4, Servers: 2, Balance: 100 * time.Millisecond, Publish: "32x1", Rounds: 1, Seed: 1, Model: "calc, default"})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"model: calc (dim 64", "model: default (dim 256", "HTTP/in-process", "2 timed rounds of each", "balance: 64 clients, 2 servers", "publish 32x1"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if lines := strings.Count(out.String(), "×"); lines != 8 {
		t.Errorf("%d table rows, want 4 (2 levels of 2 models):\n%s", lines/2, out.String())
	}
	err = Serve(context.Background(), io.Discard, ServeOptions{Registry: all.Builtins(), Concurrency: "1", Requests: 4, Repeat: 1, Prompt: 4, Tokens: 4, Slots: 2, Model: "huge"})
	if err == nil || !strings.Contains(err.Error(), `model "huge"`) {
		t.Errorf("an unknown model: %v", err)
	}
}

// BenchmarkServe runs b.N requests of 32 + 32 tokens from 64 concurrent clients through the
// in-process engine and through agentrl serve and the router on loopback, as `agentrl bench
// serve` does at concurrency 64. The difference in allocs/op and B/op is the HTTP path's own,
// which, unlike its CPU time, does not depend on what else the machine runs; with -cpuprofile it
// shows where the HTTP path's time goes.
func BenchmarkServe(b *testing.B) {
	tok, err := Tokenizer(all.Builtins(), []string{"calc"})
	if err != nil {
		b.Fatal(err)
	}
	m, err := model.New(benchModel(tok.VocabSize(), 64, 2), 1)
	if err != nil {
		b.Fatal(err)
	}
	dir := filepath.Join(b.TempDir(), "ck")
	if err := checkpoint.Save(dir, m, tok, nil); err != nil {
		b.Fatal(err)
	}
	const clients, slots, prompt, tokens = 64, 64, 32, 32
	requests := func(n int) []infer.Request {
		rng := rand.New(rand.NewPCG(1, 3))
		reqs := make([]infer.Request, n)
		for i := range reqs {
			p := make([]int32, prompt)
			for j := range p {
				p[j] = int32(rng.IntN(tok.VocabSize()))
			}
			reqs[i] = infer.Request{Prompt: p, MaxTokens: tokens, Sampling: infer.Sampling{Temperature: 1}, Seed: uint64(i), Session: strconv.Itoa(i)}
		}
		return reqs
	}
	run := func(b *testing.B, gen infer.Generator) {
		reqs := requests(b.N)
		b.ReportAllocs()
		b.ResetTimer()
		if _, _, _, err := runClients(context.Background(), gen, reqs, clients); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("in-process", func(b *testing.B) {
		eng, err := local.NewEngine(m, 0, local.EngineConfig{Slots: slots, MaxLen: prompt + tokens})
		if err != nil {
			b.Fatal(err)
		}
		defer eng.Close()
		run(b, eng)
	})
	b.Run("http", func(b *testing.B) {
		url, stop, err := startServe(dir, "", slots)
		if err != nil {
			b.Fatal(err)
		}
		defer stop()
		router, err := remote.New(remote.Options{Servers: []remote.Server{{Name: "s", URL: url, Dialect: remote.Agentrl}}, HealthInterval: -1})
		if err != nil {
			b.Fatal(err)
		}
		defer router.Close()
		run(b, router)
	})
}
