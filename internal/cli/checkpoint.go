package cli

import (
	"fmt"
	"strings"

	"github.com/agentrl/agentrl/checkpoint"
)

// CkptCmd groups the commands on checkpoint folders (agentrl checkpoint).
type CkptCmd struct {
	Merge CheckpointMergeCmd `cmd:"" help:"Write a checkpoint's LoRA adapters merged into its weights as a plain checkpoint (weights, config.json, tokenizer), for stacks that load no adapters."`
}

// CheckpointMergeCmd writes the merged export of a checkpoint with adapters.
type CheckpointMergeCmd struct {
	Checkpoint string `help:"Checkpoint folder with an adapter (adapter_config.json beside model.safetensors)." required:"" type:"existingdir" placeholder:"DIR"`
	Out        string `help:"Folder to write the merged checkpoint to (replaced atomically)." required:"" placeholder:"DIR"`
	DType      string `help:"Weights dtype: f32, bf16 or f16 (default: the checkpoint's)." name:"dtype" placeholder:"DTYPE"`
}

// Run loads the checkpoint with its adapters and saves W + alpha/rank·B·A for every adapted
// projection, without resume state.
func (c *CheckpointMergeCmd) Run(g *Globals) error {
	dtype := ""
	switch strings.ToLower(c.DType) {
	case "":
	case "f32", "float32":
		dtype = "F32"
	case "bf16", "bfloat16":
		dtype = "BF16"
	case "f16", "float16":
		dtype = "F16"
	default:
		return fmt.Errorf("checkpoint merge: --dtype %q, want f32, bf16 or f16", c.DType)
	}
	ck, err := checkpoint.Load(c.Checkpoint)
	if err != nil {
		return err
	}
	if !ck.Model.HasLoRA() {
		return fmt.Errorf("checkpoint merge: %s has no adapters (no adapter_config.json)", c.Checkpoint)
	}
	if err := checkpoint.SaveWith(c.Out, ck.Model.Merged(), ck.Tokenizer, nil, checkpoint.SaveOptions{DType: dtype}); err != nil {
		return err
	}
	fmt.Fprintf(g.Stdout, "merged %s (rank %d on %s) into %s\n", c.Checkpoint, ck.Model.LoRA.Cfg.Rank,
		strings.Join(ck.Model.LoRA.Cfg.Targets, ", "), c.Out)
	return nil
}
