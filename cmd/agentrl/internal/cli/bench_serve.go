package cli

import (
	"time"

	"github.com/agentrl/agentrl/cmd/agentrl/internal/bench"
)

// BenchServeCmd measures generation over HTTP (agentrl serve and the remote router) against the
// in-process engine, the router's balance and the latency of a weight publish.
type BenchServeCmd struct {
	Concurrency string        `help:"Comma-separated client concurrency levels." default:"1,64,1024"`
	Requests    int           `help:"Requests per level (at least 4 × the concurrency)." default:"512"`
	Repeat      int           `help:"Timed rounds per level, in-process and HTTP alternating (the best and the median are printed)." default:"5"`
	Prompt      int           `help:"Prompt tokens per request." default:"32"`
	Tokens      int           `help:"Completion tokens per request." default:"32"`
	Slots       int           `help:"The engine's continuous batch, in-process and served." default:"64"`
	Servers     int           `help:"Servers of the balance measurement." default:"4"`
	Balance     time.Duration `help:"How long the balance measurement runs." default:"5s"`
	Publish     string        `help:"Model sizes whose weight publish is timed, DIMxLAYERS[,...]." default:"64x2,512x8"`
	Rounds      int           `help:"Publish rounds (the median is printed)." default:"5"`
	Seed        uint64        `help:"Seed for weights and requests." default:"1"`
	Model       string        `help:"The overhead table's models, comma-separated: calc (the calc preset's, 0.13M parameters) and default (the default model, 3M)." default:"calc,default"`
}

// Run prints the overhead table, the balance figures and the publish latencies.
func (c *BenchServeCmd) Run(g *Globals) error {
	return bench.Serve(g.Ctx, g.Stdout, bench.ServeOptions{
		Registry: g.Envs, Concurrency: c.Concurrency, Requests: c.Requests, Repeat: c.Repeat, Prompt: c.Prompt, Tokens: c.Tokens,
		Slots: c.Slots, Servers: c.Servers, Balance: c.Balance, Publish: c.Publish, Rounds: c.Rounds, Seed: c.Seed, Model: c.Model,
	})
}
