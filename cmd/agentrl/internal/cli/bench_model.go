package cli

import "github.com/agentrl/agentrl/cmd/agentrl/internal/bench"

// BenchModelCmd measures the built-in model: a full training step (forward, backward, AdamW),
// the GEMMs of that step alone (so the ratio of the two shows what the non-GEMM work costs),
// decoding throughput with the KV cache at batch 1 and batch 32, and peak resident memory.
type BenchModelCmd struct {
	Vocab      int    `default:"2048" help:"Vocabulary size."`
	Rows       int    `default:"8" help:"Rows per training batch."`
	Seq        int    `default:"256" help:"Tokens per row."`
	Steps      int    `default:"5" help:"Timed training steps (after one warm-up step; 0: no training figures)."`
	Prompt     int    `default:"128" help:"Prompt tokens prefilled per decode slot."`
	Decode     int    `default:"64" help:"Tokens decoded per slot."`
	Engine     int    `default:"0" help:"Rounds of 32 concurrent requests that fill whole sequences, served through infer.Engine before the other figures, with heap and resident memory printed after each round (0: none)."`
	EngLen     int    `name:"engine-len" default:"0" help:"Tokens per engine sequence, prompt and completion (0: the model's MaxSeq)."`
	Configs    string `default:"" help:"Extra model sizes to time a training step and decoding for, as DIMxLAYERS[,...], e.g. 192x4,320x6 (heads = DIM/32, KV heads half, hidden ≈ 8/3·DIM)."`
	Rounds     int    `default:"3" help:"Rounds of decoding (each runs batch 1 then batch 32) and of the main model's training steps (each followed by the step's GEMMs alone); the median ratios are printed."`
	Seed       uint64 `default:"1" help:"Seed for weights and data."`
	Preset     string `help:"Measure the model a preset trains (${presets}) instead of model.DefaultConfig; --vocab is then the preset's tokenizer size."`
	Shape      string `help:"Measure a published model's shape with random weights instead: qwen3-0.6b, smollm2-360m, qwen2.5-0.5b, qwen2.5-1.5b (their config.json), or a checkpoint folder whose config.json gives the shape."`
	Precision  string `name:"precision" default:"" help:"Decode precisions to time, comma-separated: f32, bf16 (weights), bf16-kv (weights and KV cache); empty: all three; none: no decoding."`
	LoRA       int    `name:"lora" default:"0" help:"Time the LoRA RL step (adapters of this rank on all seven projections, the base frozen; Forward, ForwardBackward and OptimStep of the in-process learner) against the GEMM rate instead of full training (0: full training)."`
	Batch1Only bool   `name:"batch1-only" help:"Decode at batch 1 alone (no batch-32 figures)."`
}

// Run prints one line per figure.
func (c *BenchModelCmd) Run(g *Globals) error {
	return bench.Model(g.Ctx, g.Stdout, bench.ModelOptions{
		Vocab: c.Vocab, Rows: c.Rows, Seq: c.Seq, Steps: c.Steps, Prompt: c.Prompt, Decode: c.Decode,
		Engine: c.Engine, EngLen: c.EngLen, Configs: c.Configs, Rounds: c.Rounds, Seed: c.Seed, Preset: c.Preset,
		Shape: c.Shape, Precisions: c.Precision, LoRA: c.LoRA, Batch1Only: c.Batch1Only,
	})
}
