package bench

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/agentrl/agentrl/checkpoint"
	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/infer"
	"github.com/agentrl/agentrl/infer/local"
	"github.com/agentrl/agentrl/infer/remote"
	"github.com/agentrl/agentrl/infer/serve"
	"github.com/agentrl/agentrl/model"
	"github.com/agentrl/agentrl/tokenizer"
)

// ServeOptions configure `agentrl bench serve`.
type ServeOptions struct {
	Registry    *env.Registry
	Concurrency string        // comma-separated client concurrency levels
	Requests    int           // requests per level (at least 4 × the concurrency)
	Repeat      int           // timed rounds per level, in-process and HTTP alternating (best and median reported)
	Prompt      int           // prompt tokens per request
	Tokens      int           // completion tokens per request
	Slots       int           // the engine's continuous batch, in-process and served
	Servers     int           // servers of the balance measurement
	Balance     time.Duration // how long the balance measurement runs
	Publish     string        // model sizes whose weight publishing is timed, DIMxLAYERS[,...]
	Rounds      int           // publish rounds (median reported)
	Seed        uint64
	// Model lists the served models of the overhead table, comma-separated: "calc" (the calc
	// preset's, 0.13 M parameters, where a token costs the engine least and the HTTP path's
	// fixed cost per request is the largest share) and "default" (model.DefaultConfig over the
	// calc tokenizer's vocabulary, 3 M, the model `agentrl train` builds by default).
	Model string
}

// serveModel is the overhead table's model config by name.
func serveModel(name string, vocab int) (model.Config, error) {
	switch name {
	case "", "calc":
		return benchModel(vocab, 64, 2), nil
	case "default":
		cfg := model.DefaultConfig(vocab)
		cfg.MaxSeq = 384
		return cfg, nil
	}
	return model.Config{}, fmt.Errorf("bench serve: model %q is neither calc nor default", name)
}

// benchModel is the calc preset's model over vocab tokens.
func benchModel(vocab, dim, layers int) model.Config {
	heads := max(dim/16, 2)
	if dim >= 128 {
		heads = dim / 32
	}
	return model.Config{Vocab: vocab, Dim: dim, Layers: layers, Heads: heads, KVHeads: max(heads/2, 1), Hidden: 3 * dim,
		MaxSeq: 384, RopeTheta: 10000, NormEps: model.DefaultNormEps, TieEmbeddings: true}
}

// Serve measures the HTTP generation plane: the per-request overhead of `agentrl serve` and the
// router against the in-process engine at each concurrency, the router's balance over servers
// under heavy-tailed completion lengths, and how long a weight publish takes.
func Serve(ctx context.Context, w io.Writer, o ServeOptions) error {
	levels, err := parseInts(o.Concurrency)
	if err != nil {
		return err
	}
	tok, err := Tokenizer(o.Registry, []string{"calc"})
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "agentrl-bench-serve-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	for name := range strings.SplitSeq(cmp.Or(o.Model, "calc"), ",") {
		name = strings.TrimSpace(name)
		cfg, err := serveModel(name, tok.VocabSize())
		if err != nil {
			return err
		}
		m, err := model.New(cfg, o.Seed)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "model: %s (dim %d, %d layers, %.2fM parameters); requests of %d prompt + %d completion tokens; %d slots\n\n",
			name, cfg.Dim, cfg.Layers, float64(m.NumParams())/1e6, o.Prompt, o.Tokens, o.Slots)
		if err := overhead(ctx, w, o, levels, m, tok, filepath.Join(tmp, "ck-"+name)); err != nil {
			return err
		}
	}
	if err := balance(ctx, w, o); err != nil {
		return err
	}
	return publishLatency(ctx, w, o, tok, tmp)
}

func parseInts(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("bench serve: %q is not a positive integer", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// startServe serves the checkpoint dir on a loopback port; stop ends it.
func startServe(dir, key string, slots int) (url string, stop func(), err error) {
	url, _, stop, err = startServer(dir, key, slots)
	return url, stop, err
}

// startServer is startServe that also returns the server.
func startServer(dir, key string, slots int) (url string, srv *serve.Server, stop func(), err error) {
	srv, err = serve.Open(dir, serve.Options{APIKey: key, Slots: slots, MaxPending: 1 << 16})
	if err != nil {
		return "", nil, nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		srv.Close()
		return "", nil, nil, err
	}
	sctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { srv.Serve(sctx, ln); close(done) }()
	return "http://" + ln.Addr().String(), srv, func() { cancel(); <-done; srv.Close() }, nil
}

// run sends n requests from c concurrent clients through gen and returns the wall time, the
// mean latency of a request and the tokens generated.
func runClients(ctx context.Context, gen infer.Generator, reqs []infer.Request, c int) (time.Duration, time.Duration, int, error) {
	var next atomic.Int64
	var tokens, latNS atomic.Int64
	var first error
	var mu sync.Mutex
	var wg sync.WaitGroup
	t0 := time.Now()
	for range c {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(reqs) {
					return
				}
				s := time.Now()
				comp, err := gen.Generate(ctx, reqs[i])
				latNS.Add(int64(time.Since(s)))
				tokens.Add(int64(len(comp.Tokens)))
				if err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	return time.Since(t0), time.Duration(latNS.Load() / int64(len(reqs))), int(tokens.Load()), first
}

// overhead compares in-process generation with the same engine behind agentrl serve and the
// router, level by level.
func overhead(ctx context.Context, w io.Writer, o ServeOptions, levels []int, m *model.Model, tok *tokenizer.Tokenizer, dir string) error {
	if err := checkpoint.Save(dir, m, tok, nil); err != nil {
		return err
	}
	eng, err := local.NewEngine(m, 0, local.EngineConfig{Slots: o.Slots, MaxLen: o.Prompt + o.Tokens})
	if err != nil {
		return err
	}
	defer eng.Close()
	url, srv, stop, err := startServer(dir, "", o.Slots)
	if err != nil {
		return err
	}
	defer stop()
	router, err := remote.New(remote.Options{Servers: []remote.Server{{Name: "s", URL: url, Dialect: remote.Agentrl}}, HealthInterval: -1})
	if err != nil {
		return err
	}
	defer router.Close()
	rng := rand.New(rand.NewPCG(o.Seed, 3))
	repeat := max(o.Repeat, 1)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "concurrency\trequests\tin-process tok/s\tHTTP tok/s\tHTTP/in-process\tmedian\t(rounds)\tlatency in-process\tlatency HTTP\toverhead µs/request\toverhead µs/token\tCPU µs/request in-process\tCPU µs/request HTTP\tsteps/request in-process\tHTTP\t")
	for _, c := range levels {
		n := max(o.Requests, 4*c)
		reqs := make([]infer.Request, n)
		for i := range reqs {
			p := make([]int32, o.Prompt)
			for j := range p {
				p[j] = int32(rng.IntN(tok.VocabSize()))
			}
			reqs[i] = infer.Request{Prompt: p, MaxTokens: o.Tokens, Sampling: infer.Sampling{Temperature: 1}, Seed: uint64(i), Session: strconv.Itoa(i)}
		}
		// A warm-up round of each, then the timed ones, alternating so that a change in what
		// else the machine runs falls on both alike; each figure is the median of its rounds.
		if _, _, _, err := runClients(ctx, eng, reqs[:min(n, 2*c)], c); err != nil {
			return err
		}
		if _, _, _, err := runClients(ctx, router, reqs[:min(n, 2*c)], c); err != nil {
			return err
		}
		var rl, rh, ratio, sl, sh []float64
		var ll, lh, cl, ch []time.Duration
		// steps counts the decode steps of a round per request: completion tokens over slots
		// when every step is full, more when requests reach the engine too late to share steps.
		steps := func(before, after local.Stats) float64 { return float64(after.Steps-before.Steps) / float64(n) }
		for range repeat {
			c0, s0 := cpuTime(), eng.Stats()
			wl, l, tl, err := runClients(ctx, eng, reqs, c)
			if err != nil {
				return err
			}
			c1, s1, h0 := cpuTime(), eng.Stats(), srv.EngineStats()
			wh, h, th, err := runClients(ctx, router, reqs, c)
			if err != nil {
				return err
			}
			c2 := cpuTime()
			sl, sh = append(sl, steps(s0, s1)), append(sh, steps(h0, srv.EngineStats()))
			a, b := float64(tl)/wl.Seconds(), float64(th)/wh.Seconds()
			rl, rh, ratio = append(rl, a), append(rh, b), append(ratio, b/a)
			ll, lh = append(ll, l), append(lh, h)
			cl, ch = append(cl, (c1-c0)/time.Duration(n)), append(ch, (c2-c1)/time.Duration(n))
		}
		ov := median(lh) - median(ll)
		fmt.Fprintf(tw, "%d\t%d\t%.0f\t%.0f\t%.2f×\t%.2f×\t%s\t%s\t%s\t%.0f\t%.1f\t%.0f\t%.0f\t%.2f\t%.2f\t\n", c, n, slices.Max(rl), slices.Max(rh), slices.Max(rh)/slices.Max(rl), medianOf(ratio), ratioRange(ratio),
			median(ll).Round(time.Microsecond), median(lh).Round(time.Microsecond), float64(ov.Microseconds()), float64(ov.Microseconds())/float64(o.Tokens),
			float64(median(cl).Nanoseconds())/1e3, float64(median(ch).Nanoseconds())/1e3, medianOf(sl), medianOf(sh))
	}
	tw.Flush()
	fmt.Fprintf(w, "%d timed rounds of each, in-process and HTTP alternating: throughput is the best round's (what other processes on the machine\n", repeat)
	fmt.Fprintln(w, "took least from), HTTP/in-process the ratio of the best rounds; median: the median of the rounds' ratios, (rounds) their lowest and highest;")
	fmt.Fprintln(w, "latency and CPU: medians of the rounds")
	fmt.Fprintln(w, "overhead: mean request latency over HTTP (agentrl serve on loopback, the router, JSON both ways) minus in-process; per token: divided by the completion tokens")
	fmt.Fprintln(w, "CPU: the process's user+system CPU time per request (engine, server, router and clients), steadier than wall time on a shared machine")
	fmt.Fprintf(w, "steps/request: the engine's decode steps per request (medians of the rounds); %d-token completions in full batches of %d slots take %.2f\n", o.Tokens, o.Slots, float64(o.Tokens)/float64(o.Slots))
	fmt.Fprintln(w)
	return nil
}

func medianOf(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// ratioRange is the lowest and highest of ratios, or "" for one.
func ratioRange(v []float64) string {
	if len(v) < 2 {
		return ""
	}
	return fmt.Sprintf("%.2f–%.2f", slices.Min(v), slices.Max(v))
}

// balance runs 64 clients of multi-turn sessions against servers that take time proportional to
// heavy-tailed completion lengths (Pareto α 1.5), and samples the router's outstanding requests
// per server.
func balance(ctx context.Context, w io.Writer, o ServeOptions) error {
	const clients, perToken = 64, 20 * time.Microsecond
	var urls []string
	for i := range o.Servers {
		var mu sync.Mutex
		rng := rand.New(rand.NewPCG(o.Seed, uint64(100+i)))
		srv := &http.Server{Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			mu.Lock()
			n := int(math.Min(8/math.Pow(1-rng.Float64(), 1/1.5), 4096)) // Pareto, minimum 8
			mu.Unlock()
			select {
			case <-time.After(time.Duration(n) * perToken):
			case <-r.Context().Done():
				return
			}
			c := infer.Completion{Tokens: make([]int32, n), Logprobs: make([]float32, n), Versions: make([]int32, n), Finish: infer.FinishLength}
			rw.Header().Set("Content-Type", "application/json")
			json.NewEncoder(rw).Encode(c)
		})}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		go srv.Serve(ln)
		defer srv.Close()
		urls = append(urls, "http://"+ln.Addr().String())
	}
	var servers []remote.Server
	for i, u := range urls {
		servers = append(servers, remote.Server{Name: fmt.Sprint(i), URL: u, Dialect: remote.Agentrl})
	}
	router, err := remote.New(remote.Options{Servers: servers, HealthInterval: -1})
	if err != nil {
		return err
	}
	defer router.Close()
	bctx, cancel := context.WithTimeout(ctx, o.Balance)
	defer cancel()
	var wg sync.WaitGroup
	var sessions, requests atomic.Int64
	for c := range clients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(o.Seed, uint64(c)))
			for bctx.Err() == nil {
				s := strconv.FormatInt(sessions.Add(1), 10)
				for range 1 + rng.IntN(4) { // an episode of 1-4 turns on one session
					req := infer.Request{Prompt: []int32{1, 2, 3}, MaxTokens: 4096, Sampling: infer.Sampling{Temperature: 1}, Session: s}
					if _, err := router.Generate(bctx, req); err != nil {
						return
					}
					requests.Add(1)
				}
			}
		})
	}
	sum := make([]float64, o.Servers)
	var instRatio float64
	samples := 0
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
loop:
	for {
		select {
		case <-bctx.Done():
			break loop
		case <-tick.C:
		}
		st := router.Stats()
		var tot, mx float64
		for i, s := range st {
			sum[i] += float64(s.Outstanding)
			tot += float64(s.Outstanding)
			mx = math.Max(mx, float64(s.Outstanding))
		}
		if tot > 0 {
			instRatio += mx / (tot / float64(len(st)))
			samples++
		}
	}
	wg.Wait()
	var mean float64
	for _, s := range sum {
		mean += s
	}
	mean /= float64(len(sum))
	fmt.Fprintf(w, "balance: %d clients, %d servers, %s, %d requests in %d sessions (1-4 turns, sticky), completion lengths Pareto α 1.5 from 8 tokens at %s a token\n",
		clients, o.Servers, o.Balance, requests.Load(), sessions.Load(), perToken)
	avg := make([]string, len(sum))
	for i, s := range sum {
		avg[i] = fmt.Sprintf("%.2f", s/float64(max(samples, 1)))
	}
	fmt.Fprintf(w, "  time-averaged outstanding per server: %s; max/mean %.3f (goal ≤ 1.25)\n", strings.Join(avg, ", "), slices.Max(sum)/mean)
	fmt.Fprintf(w, "  instantaneous max/mean, averaged over %d samples at 1 ms: %.3f\n\n", samples, instRatio/float64(max(samples, 1)))
	return nil
}

// publishLatency times, for each model size, writing the weights (checkpoint.Save) and
// publishing them to two agentrl servers until both serve the new version.
func publishLatency(ctx context.Context, w io.Writer, o ServeOptions, tok *tokenizer.Tokenizer, tmp string) error {
	for spec := range strings.SplitSeq(o.Publish, ",") {
		var dim, layers int
		if _, err := fmt.Sscanf(strings.TrimSpace(spec), "%dx%d", &dim, &layers); err != nil {
			return fmt.Errorf("bench serve: publish size %q is not DIMxLAYERS", spec)
		}
		cfg := benchModel(tok.VocabSize(), dim, layers)
		m, err := model.New(cfg, o.Seed)
		if err != nil {
			return err
		}
		base := filepath.Join(tmp, fmt.Sprintf("base-%s", spec))
		if err := checkpoint.Save(base, m, tok, nil); err != nil {
			return err
		}
		var servers []remote.Server
		for i := range 2 {
			url, stop, err := startServe(base, "k", 4)
			if err != nil {
				return err
			}
			defer stop()
			servers = append(servers, remote.Server{Name: fmt.Sprint(i), URL: url, Dialect: remote.Agentrl, APIKey: "k"})
		}
		router, err := remote.New(remote.Options{Servers: servers, HealthInterval: -1})
		if err != nil {
			return err
		}
		var saves, pubs, totals []time.Duration
		var size int64
		for v := range o.Rounds {
			m.Params.Data[v%len(m.Params.Data)] += 1e-3 // a new policy
			dir := filepath.Join(tmp, fmt.Sprintf("pub-%s-v%d", spec, v+1))
			t0 := time.Now()
			if err := checkpoint.Save(dir, m, tok, nil); err != nil {
				router.Close()
				return err
			}
			t1 := time.Now()
			path := filepath.Join(dir, "model.safetensors")
			if err := router.PublishWeights(ctx, int32(v+1), path, dir); err != nil {
				router.Close()
				return err
			}
			t2 := time.Now()
			if fi, err := os.Stat(path); err == nil {
				size = fi.Size()
			}
			os.RemoveAll(dir)
			saves, pubs, totals = append(saves, t1.Sub(t0)), append(pubs, t2.Sub(t1)), append(totals, t2.Sub(t0))
		}
		router.Close()
		fmt.Fprintf(w, "publish %s (%.2fM parameters, %.1f MB): save %s, publish to 2 servers %s, save → both serving %s (median of %d)\n",
			spec, float64(m.NumParams())/1e6, float64(size)/1e6, median(saves), median(pubs), median(totals), o.Rounds)
	}
	return nil
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2].Round(10 * time.Microsecond)
}
