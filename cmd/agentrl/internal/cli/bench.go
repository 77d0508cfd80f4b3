package cli

// BenchCmd groups the performance measurements recorded in BENCHMARKS.md.
type BenchCmd struct {
	Rollout   BenchRolloutCmd   `cmd:"" help:"Agent-loop orchestration throughput and memory with a zero-latency scripted generator."`
	Model     BenchModelCmd     `cmd:"" help:"Model kernels, training step and decode throughput."`
	Train     BenchTrainCmd     `cmd:"" help:"End-to-end learning: held-out pass@1 lift over seeds."`
	Serve     BenchServeCmd     `cmd:"" help:"Generation over HTTP vs in-process: overhead, throughput, router balance, weight publish latency."`
	Async     BenchAsyncCmd     `cmd:"" help:"Synchronous vs asynchronous RL on calc with a simulated heavy-tailed step latency."`
	Monitor   BenchMonitorCmd   `cmd:"" help:"One of the monitor's actions, off vs on over seeds: held-out success and the invariant it acts on, with 95% intervals."`
	Paper     BenchPaperCmd     `cmd:"" help:"The papers' orderings on the built-in tasks, over seeds."`
	Dist      BenchDistCmd      `cmd:"" help:"The distributed data plane at scale: worker processes, a zero-latency generator, trajectories/s, learner wait, weight fan-out."`
	Precision BenchPrecisionCmd `cmd:"" help:"RL on calc sampled with f32 vs bf16 weights (rollout.precision): held-out success, behaviour KL, IS-weight spread and generation time, with 95% intervals."`
}
