// Package bench is the harness behind `agentrl bench`: the model's kernels, training step,
// decoding and engine memory (Model), end-to-end learning over seeds (Train), and the agent
// loop's own cost (Rollout): episodes and environment steps per second with a zero-latency
// scripted generator (each environment's expert playing through the real tokenizer), the
// orchestration overhead per step (time spent neither in the environment, the tokenizer nor the
// generator), scaling from one core to two, and memory per in-flight episode; synchronous vs
// asynchronous RL (Async); and the learning comparisons of papers' orderings (PaperPPOGAE). Each
// prints its figures to an io.Writer; BENCHMARKS.md records them with their commands.
package bench

import "strings"

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
