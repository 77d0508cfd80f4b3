package cli

import (
	"fmt"
	"strings"

	"github.com/agentrl/agentrl/checkpoint"
)

// CkptCmd groups the commands on checkpoint folders (agentrl checkpoint).
type CkptCmd struct {
	Export CheckpointExportCmd `cmd:"" help:"Write a checkpoint's weights (and adapters) without resume state, in the dtype its model was published in (a run's own checkpoints keep float32), for other stacks."`
	Merge  CheckpointMergeCmd  `cmd:"" help:"Write a checkpoint's LoRA adapters merged into its weights as a plain checkpoint (weights, config.json, tokenizer), for stacks that load no adapters."`
}

// CheckpointExportCmd writes a checkpoint for other stacks.
type CheckpointExportCmd struct {
	Checkpoint string `help:"Checkpoint folder." required:"" type:"existingdir" placeholder:"DIR"`
	Out        string `help:"Folder to write to (replaced atomically)." required:"" placeholder:"DIR"`
	DType      string `help:"Weights dtype: f32, bf16 or f16 (default: the dtype the model was first loaded in, f32 for a model trained from scratch)." name:"dtype" placeholder:"DTYPE"`
}

// Run loads the checkpoint and saves its weights (and adapters) without resume state.
func (c *CheckpointExportCmd) Run(g *Globals) error {
	dtype, err := parseDType("checkpoint export", c.DType)
	if err != nil {
		return err
	}
	ck, err := checkpoint.Load(c.Checkpoint)
	if err != nil {
		return err
	}
	if err := checkpoint.SaveWith(c.Out, ck.Model, ck.Tokenizer, nil, checkpoint.SaveOptions{DType: dtype}); err != nil {
		return err
	}
	saved := dtype
	if saved == "" {
		saved = ck.Model.DType
	}
	fmt.Fprintf(g.Stdout, "exported %s to %s (%s weights)\n", c.Checkpoint, c.Out, strings.ToLower(saved))
	return nil
}

// parseDType reads a --dtype flag as a safetensors dtype; "" stays "".
func parseDType(cmd, s string) (string, error) {
	switch strings.ToLower(s) {
	case "":
		return "", nil
	case "f32", "float32":
		return "F32", nil
	case "bf16", "bfloat16":
		return "BF16", nil
	case "f16", "float16":
		return "F16", nil
	}
	return "", fmt.Errorf("%s: --dtype %q, want f32, bf16 or f16", cmd, s)
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
	dtype, err := parseDType("checkpoint merge", c.DType)
	if err != nil {
		return err
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
