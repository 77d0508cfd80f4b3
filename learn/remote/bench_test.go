//go:build unix

package remote

import (
	"context"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"github.com/agentrl/agentrl/algo"
	"github.com/agentrl/agentrl/learn"
	"github.com/agentrl/agentrl/model"
	"github.com/agentrl/agentrl/traj"
)

// calcConfig is the calc preset's model (pipeline.Preset): 0.13 M parameters.
var calcConfig = model.Config{Vocab: 512, Dim: 64, Layers: 2, Heads: 4, KVHeads: 2, Hidden: 192, MaxSeq: 384,
	RopeTheta: 10000, NormEps: 1e-5, TieEmbeddings: true}

// calcBatch is a step's worth of calc-like episodes: groups of 8, prompts of 40–80 tokens,
// answers of 20–100.
func calcBatch(groups int) []*traj.Trajectory {
	rng := rand.New(rand.NewPCG(1, 2))
	var out []*traj.Trajectory
	for g := range groups {
		prompt := make([]int32, 40+rng.IntN(40))
		for i := range prompt {
			prompt[i] = int32(rng.IntN(calcConfig.Vocab))
		}
		for k := range 8 {
			ans := make([]int32, 20+rng.IntN(80))
			for i := range ans {
				ans[i] = int32(rng.IntN(calcConfig.Vocab))
			}
			out = append(out, episode("e", uint64(g), prompt, ans, float64(k%2)))
		}
	}
	return out
}

// BenchmarkRLStep is one calc-sized RL step (16 groups of 8, 4 minibatches) on two copies of
// the calc model: in-process, and through the learner contract over HTTP on loopback to the same
// built-in backend, interleaved (in alternating order) so that both see the same machine load. It reports each one's
// seconds per step (wall and the process's CPU time, the steadier of the two on a loaded machine),
// their ratios (in-process time over HTTP time: the throughput through the contract relative to
// in-process) and the bytes on the wire per trained token.
func BenchmarkRLStep(b *testing.B) {
	trajs := calcBatch(16)
	var trained float64
	for _, t := range trajs {
		for _, m := range t.LossMask[1:] {
			if m {
				trained++
			}
		}
	}
	newUpdate := func() (*learn.Learner, *learn.RL) {
		m, err := model.New(calcConfig, 1)
		if err != nil {
			b.Fatal(err)
		}
		cfg := optimConfig
		cfg.LR = 1e-4
		l, err := learn.New(m, cfg, 1<<30, 384)
		if err != nil {
			b.Fatal(err)
		}
		u := rlUpdate(b, l, algo.DefaultLossConfig())
		u.Epochs, u.Minibatches = 1, 4
		return l, u
	}
	ll, lu := newUpdate()
	hl, hu := newUpdate()
	bi := &learn.Builtin{Model: hl.Model, Opt: hl.Opt, RowLen: 384}
	s, err := NewServer(bi, "", calcConfig.Vocab, 0, Info{})
	if err != nil {
		b.Fatal(err)
	}
	c, err := Dial(context.Background(), Options{URL: serveHTTP(b, s), Timeout: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	hl.Backend = c
	var local, remote, localCPU, remoteCPU time.Duration
	b.ResetTimer()
	for i := range b.N {
		order := []int{0, 1}
		if i%2 == 1 {
			order = []int{1, 0} // alternate which goes first, so neither gains from the order
		}
		for _, k := range order {
			u := []*learn.RL{lu, hu}[k]
			u.Learner.Step = 0
			t0, c0 := time.Now(), cpuTime(b)
			if _, err := u.Step(trajs, int32(i), rand.New(rand.NewPCG(3, uint64(i)))); err != nil {
				b.Fatal(err)
			}
			if k == 0 {
				local += time.Since(t0)
				localCPU += cpuTime(b) - c0
			} else {
				remote += time.Since(t0)
				remoteCPU += cpuTime(b) - c0
			}
		}
	}
	b.StopTimer()
	_ = ll
	n := float64(b.N)
	b.ReportMetric(local.Seconds()/n, "inprocess-s/step")
	b.ReportMetric(remote.Seconds()/n, "http-s/step")
	b.ReportMetric(local.Seconds()/remote.Seconds(), "http/inprocess-throughput")
	b.ReportMetric(localCPU.Seconds()/n, "inprocess-cpu-s/step")
	b.ReportMetric(remoteCPU.Seconds()/n, "http-cpu-s/step")
	b.ReportMetric(localCPU.Seconds()/remoteCPU.Seconds(), "http/inprocess-cpu")
	b.ReportMetric(float64(c.Sent+c.Received)/n/trained, "wire-bytes/trained-token")
	b.ReportMetric(trained, "trained-tokens/step")
}

// cpuTime is the CPU time this process has used (user and system, all threads).
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
