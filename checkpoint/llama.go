package checkpoint

import (
	"fmt"

	"github.com/agentrl/agentrl/model"
)

// llamaTensorCount is how many tensors a Llama checkpoint of cfg holds: nine per layer, the
// embedding and final norm, and the LM head unless tied.
func llamaTensorCount(c model.Config) int {
	n := 9*c.Layers + 2
	if !c.TieEmbeddings {
		n++
	}
	return n
}

// llamaTensors lists the names and shapes (no data) of a Hugging Face Llama checkpoint of cfg,
// in model.Params' storage order. Loading checks a file against this list before allocating a
// model, so the list is derived from the config alone; a test keeps it equal to
// model.Params.Tensors.
func llamaTensors(c model.Config) []Tensor {
	hd := c.HeadDim()
	out := make([]Tensor, 0, llamaTensorCount(c))
	add := func(name string, shape ...int) { out = append(out, Tensor{Name: name, Shape: shape}) }
	add("model.embed_tokens.weight", c.Vocab, c.Dim)
	for l := range c.Layers {
		pre := fmt.Sprintf("model.layers.%d.", l)
		add(pre+"input_layernorm.weight", c.Dim)
		add(pre+"self_attn.q_proj.weight", c.Heads*hd, c.Dim)
		add(pre+"self_attn.k_proj.weight", c.KVHeads*hd, c.Dim)
		add(pre+"self_attn.v_proj.weight", c.KVHeads*hd, c.Dim)
		add(pre+"self_attn.o_proj.weight", c.Dim, c.Heads*hd)
		add(pre+"post_attention_layernorm.weight", c.Dim)
		add(pre+"mlp.gate_proj.weight", c.Hidden, c.Dim)
		add(pre+"mlp.up_proj.weight", c.Hidden, c.Dim)
		add(pre+"mlp.down_proj.weight", c.Dim, c.Hidden)
	}
	add("model.norm.weight", c.Dim)
	if !c.TieEmbeddings {
		add("lm_head.weight", c.Vocab, c.Dim)
	}
	return out
}
