package remote

import (
	"context"
	"fmt"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/env/all"
)

// BenchmarkStep measures one remote step (POST /step, JSON both ways) on loopback TCP with 1 and
// 64 concurrent sessions, each session its own client and connection. ns/op is the wall time per
// step across all sessions; µs/step-rtt is the mean round trip one session sees.
//
//	go test -run '^$' -bench Step -benchtime 3s ./env/remote
func BenchmarkStep(b *testing.B) {
	srv, err := NewServer(guessSpec(nil, nil, nil), ServerOptions{})
	if err != nil {
		b.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	defer srv.Close()
	for _, sessions := range []int{1, 64} {
		b.Run(fmt.Sprintf("sessions=%d", sessions), func(b *testing.B) {
			ctx := context.Background()
			clients := make([]*Client, sessions)
			for i := range clients {
				c, err := Dial(hs.URL, ClientOptions{})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := c.Reset(ctx, int64(i)); err != nil {
					b.Fatal(err)
				}
				defer c.Close()
				clients[i] = c
			}
			var left atomic.Int64
			var rtt atomic.Int64
			b.ResetTimer()
			left.Store(int64(b.N))
			var wg sync.WaitGroup
			for _, c := range clients {
				wg.Go(func() {
					for left.Add(-1) >= 0 {
						start := time.Now()
						if _, err := c.Step(ctx, "echo a short tool call"); err != nil {
							b.Error(err)
							return
						}
						rtt.Add(int64(time.Since(start)))
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			elapsed := b.Elapsed()
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "steps/s")
			b.ReportMetric(float64(rtt.Load())/float64(b.N)/1e3, "µs/step-rtt")
		})
	}
}

// BenchmarkPoolEpisodes measures environment steps per second at 64 concurrent episodes of calc
// (its calculator tool included), played by its expert: in-process, and through a Pool over
// loopback HTTP to a server of the same environment (the path a run's remote environment takes:
// a session per episode, kept-alive connections, reset and close per episode).
//
//	go test -run '^$' -bench PoolEpisodes -benchtime 20000x ./env/remote
func BenchmarkPoolEpisodes(b *testing.B) {
	local, err := all.Builtins().Lookup("calc")
	if err != nil {
		b.Fatal(err)
	}
	srv, err := NewServer(local, ServerOptions{})
	if err != nil {
		b.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	defer srv.Close()
	pool, err := OpenPool(context.Background(), "calc-remote", PoolConfig{URL: hs.URL, MaxSessions: 64}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	remoteSpec := pool.Spec()
	for _, arm := range []struct {
		name string
		spec env.Spec
	}{{"in-process", local}, {"remote", remoteSpec}} {
		b.Run(arm.name+"/episodes=64", func(b *testing.B) {
			var left atomic.Int64
			left.Store(int64(b.N))
			var seeds atomic.Int64
			b.ResetTimer()
			var wg sync.WaitGroup
			for range 64 {
				wg.Go(func() {
					for left.Load() > 0 {
						seed := seeds.Add(1)
						e, err := arm.spec.New()
						if err != nil {
							b.Error(err)
							return
						}
						ep, err := env.Play(context.Background(), e, local.Expert(seed, 0, expertRand(seed)), seed, 8)
						if c, ok := e.(env.Closer); ok {
							c.Close()
						}
						if err != nil {
							b.Error(err)
							return
						}
						left.Add(-int64(len(ep.Steps)))
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "steps/s")
		})
	}
}
