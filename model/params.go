package model

import (
	"fmt"
	"strings"
)

// Params holds every weight in one flat slice, Data, with named views into it; Model.Grads has
// the same type and layout, so the optimizer is one loop over one slice. Views follow Hugging
// Face Llama layout (out_features, in_features) so checkpoints map one to one. The projections
// that read the same input are stored next to each other (q,k,v and gate,up), which lets one GEMM
// compute them together; Q, K, V, Gate and Up are views into those stacks.
type Params struct {
	Data []float32

	Embed  []float32 // model.embed_tokens (Vocab, Dim)
	Layers []LayerParams
	Norm   []float32 // model.norm (Dim)
	LMHead []float32 // lm_head (Vocab, Dim); the same slice as Embed when embeddings are tied

	// Value and ValueBias are the value head (PPO's critic), a linear map from the final-norm
	// hidden state to one scalar per position: value_head.weight (1, Dim) and value_head.bias (1).
	// They come after every Llama tensor in Data, and are nil when the model has no value head.
	Value     []float32
	ValueBias []float32

	tensors []NamedTensor
}

// The value head's tensor names. No Llama checkpoint has them; checkpoint keeps them out of
// model.safetensors, so other stacks never see them.
const (
	ValueHeadWeight = "value_head.weight"
	ValueHeadBias   = "value_head.bias"
)

// LayerParams are the views of one decoder block.
type LayerParams struct {
	AttnNorm []float32 // input_layernorm (Dim)
	QKV      []float32 // q_proj, k_proj, v_proj stacked ((Heads+2·KVHeads)·HeadDim, Dim)
	Q        []float32 // self_attn.q_proj (Heads·HeadDim, Dim)
	K        []float32 // self_attn.k_proj (KVHeads·HeadDim, Dim)
	V        []float32 // self_attn.v_proj (KVHeads·HeadDim, Dim)
	O        []float32 // self_attn.o_proj (Dim, Heads·HeadDim)
	MLPNorm  []float32 // post_attention_layernorm (Dim)
	GateUp   []float32 // gate_proj, up_proj stacked (2·Hidden, Dim)
	Gate     []float32 // mlp.gate_proj (Hidden, Dim)
	Up       []float32 // mlp.up_proj (Hidden, Dim)
	Down     []float32 // mlp.down_proj (Dim, Hidden)

	// The options of Config, nil where the config has none: biases (QKVBias stacks q_proj,
	// k_proj and v_proj's biases as QKV stacks their weights; GateUpBias gate_proj's and
	// up_proj's) and Qwen3's per-head norms of q and k.
	QKVBias    []float32 // self_attn.{q,k,v}_proj.bias ((Heads+2·KVHeads)·HeadDim)
	QNorm      []float32 // self_attn.q_norm (HeadDim)
	KNorm      []float32 // self_attn.k_norm (HeadDim)
	OBias      []float32 // self_attn.o_proj.bias (Dim)
	GateUpBias []float32 // mlp.{gate,up}_proj.bias (2·Hidden)
	DownBias   []float32 // mlp.down_proj.bias (Dim)
}

// NamedTensor is one weight under its Hugging Face Llama name. Data is a view into Params.Data
// starting at Offset; writing through it changes the model.
type NamedTensor struct {
	Name   string
	Shape  []int
	Offset int
	Data   []float32
}

// valueHeadParams is the size of the value head: a weight per hidden unit and a bias.
func valueHeadParams(c Config) int { return c.Dim + 1 }

// numParams counts the floats of the Llama weights of a model with this config (the value head
// excluded).
func numParams(c Config) int {
	hd := c.HeadDim()
	layer := 2*c.Dim + c.qkvDim()*c.Dim + c.Dim*c.Heads*hd + 3*c.Hidden*c.Dim + int(c.layerExtras())
	n := c.Vocab*c.Dim + c.Layers*layer + c.Dim
	if !c.TieEmbeddings {
		n += c.Vocab * c.Dim
	}
	return n
}

// newParams lays out views over data, which must hold numParams(c) floats, and
// valueHeadParams(c) more when value is true.
func newParams(c Config, data []float32, value bool, shapeOnly ...bool) Params {
	p := Params{Data: data, Layers: make([]LayerParams, c.Layers)}
	off := 0
	shapes := len(shapeOnly) > 0 && shapeOnly[0]
	take := func(name string, shape ...int) []float32 {
		n := 1
		for _, s := range shape {
			n *= s
		}
		if shapes {
			if name != "" {
				p.tensors = append(p.tensors, NamedTensor{Name: name, Shape: shape, Offset: off})
			}
			off += n
			return nil
		}
		v := data[off : off+n : off+n]
		if name != "" {
			p.tensors = append(p.tensors, NamedTensor{Name: name, Shape: shape, Offset: off, Data: v})
		}
		off += n
		return v
	}
	view := func(start int) []float32 { // the tensors taken since start, as one slice
		if shapes {
			return nil
		}
		return data[start:off:off]
	}
	hd := c.HeadDim()
	p.Embed = take("model.embed_tokens.weight", c.Vocab, c.Dim)
	for l := range p.Layers {
		L := &p.Layers[l]
		pre := fmt.Sprintf("model.layers.%d.", l)
		L.AttnNorm = take(pre+"input_layernorm.weight", c.Dim)
		start := off
		L.Q = take(pre+"self_attn.q_proj.weight", c.Heads*hd, c.Dim)
		L.K = take(pre+"self_attn.k_proj.weight", c.KVHeads*hd, c.Dim)
		L.V = take(pre+"self_attn.v_proj.weight", c.KVHeads*hd, c.Dim)
		L.QKV = view(start)
		if c.QKVBias {
			start = off
			take(pre+"self_attn.q_proj.bias", c.Heads*hd)
			take(pre+"self_attn.k_proj.bias", c.KVHeads*hd)
			take(pre+"self_attn.v_proj.bias", c.KVHeads*hd)
			L.QKVBias = view(start)
		}
		if c.QKNorm {
			L.QNorm = take(pre+"self_attn.q_norm.weight", hd)
			L.KNorm = take(pre+"self_attn.k_norm.weight", hd)
		}
		L.O = take(pre+"self_attn.o_proj.weight", c.Dim, c.Heads*hd)
		if c.OBias {
			L.OBias = take(pre+"self_attn.o_proj.bias", c.Dim)
		}
		L.MLPNorm = take(pre+"post_attention_layernorm.weight", c.Dim)
		start = off
		L.Gate = take(pre+"mlp.gate_proj.weight", c.Hidden, c.Dim)
		L.Up = take(pre+"mlp.up_proj.weight", c.Hidden, c.Dim)
		L.GateUp = view(start)
		if c.MLPBias {
			start = off
			take(pre+"mlp.gate_proj.bias", c.Hidden)
			take(pre+"mlp.up_proj.bias", c.Hidden)
			L.GateUpBias = view(start)
		}
		L.Down = take(pre+"mlp.down_proj.weight", c.Dim, c.Hidden)
		if c.MLPBias {
			L.DownBias = take(pre+"mlp.down_proj.bias", c.Dim)
		}
	}
	p.Norm = take("model.norm.weight", c.Dim)
	if c.TieEmbeddings {
		p.LMHead = p.Embed
	} else {
		p.LMHead = take("lm_head.weight", c.Vocab, c.Dim)
	}
	if value {
		p.Value = take(ValueHeadWeight, 1, c.Dim)
		p.ValueBias = take(ValueHeadBias, 1)
	}
	if shapes {
		return p
	}
	if off != len(data) {
		panic(fmt.Sprintf("model: layout covers %d of %d floats", off, len(data)))
	}
	return p
}

// TensorShapes lists the names and shapes of the weights of a model of c (the value head
// excluded), in storage order, without allocating the weights: Params.Tensors without Data and
// Offset. c must be valid.
func (c Config) TensorShapes() []NamedTensor {
	p := newParams(c, make([]float32, 0), false, true)
	return p.tensors
}

// Bias reports whether t is a bias (biases take no weight decay, and start at zero).
func (t NamedTensor) Bias() bool { return strings.HasSuffix(t.Name, ".bias") }

// Tensors lists every weight under its Hugging Face Llama name, in storage order, then the value
// head's two tensors when there is one. With tied embeddings there is no "lm_head.weight", as in
// HF checkpoints with tie_word_embeddings. The tensors tile Data exactly: their Offsets and
// lengths cover it without gaps.
func (p *Params) Tensors() []NamedTensor {
	return append([]NamedTensor(nil), p.tensors...)
}

// ValueHead reports whether t is a tensor of the value head rather than a Llama weight.
func (t NamedTensor) ValueHead() bool { return t.Name == ValueHeadWeight || t.Name == ValueHeadBias }

// Decays reports whether the optimizer should apply weight decay to t: the matrices take it, the
// norm gains do not (decaying a gain toward 0 fights the normalization it scales).
func (t NamedTensor) Decays() bool {
	return len(t.Shape) == 2
}
