package checkpoint

import "github.com/agentrl/agentrl/model"

// llamaTensorCount is how many tensors a checkpoint of cfg holds: nine per layer and those of
// the family's options (biases, q/k norms), the embedding and final norm, and the LM head unless
// tied. It is computed without listing them, before a config is trusted with an allocation.
func llamaTensorCount(c model.Config) int {
	per := 9
	if c.QKVBias {
		per += 3
	}
	if c.QKNorm {
		per += 2
	}
	if c.OBias {
		per++
	}
	if c.MLPBias {
		per += 3
	}
	n := per*c.Layers + 2
	if !c.TieEmbeddings {
		n++
	}
	return n
}

// llamaTensors lists the names and shapes (no data) of a Hugging Face checkpoint of cfg (Llama,
// Mistral, Qwen2 or Qwen3 names), in model.Params' storage order. Loading checks a file against
// this list before allocating a model, so the list is derived from the config alone.
func llamaTensors(c model.Config) []Tensor {
	shapes := c.TensorShapes()
	out := make([]Tensor, len(shapes))
	for i, t := range shapes {
		out[i] = Tensor{Name: t.Name, Shape: t.Shape}
	}
	return out
}
