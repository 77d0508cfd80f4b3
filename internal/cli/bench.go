package cli

// BenchCmd groups the performance measurements recorded in BENCHMARKS.md.
type BenchCmd struct {
	Rollout BenchRolloutCmd `cmd:"" help:"Agent-loop orchestration throughput and memory with a zero-latency scripted generator."`
	Model   BenchModelCmd   `cmd:"" help:"Model kernels, training step and decode throughput."`
	Train   BenchTrainCmd   `cmd:"" help:"End-to-end learning: held-out pass@1 lift over seeds."`
	Serve   BenchServeCmd   `cmd:"" help:"Generation over HTTP vs in-process: overhead, throughput, router balance, weight publish latency."`
	Async   BenchAsyncCmd   `cmd:"" help:"Synchronous vs asynchronous RL on calc with a simulated heavy-tailed step latency."`
	Paper   BenchPaperCmd   `cmd:"" help:"A paper's ordering of learning algorithms at tiny scale, over seeds (issue 17)."`
}
