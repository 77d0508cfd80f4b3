package pipeline

import (
	"fmt"
	"path/filepath"
	"strconv"

	"github.com/agentrl/agentrl/checkpoint"
	"github.com/agentrl/agentrl/learn/remote"
	"github.com/agentrl/agentrl/model"
	"github.com/agentrl/agentrl/optim"
	"github.com/agentrl/agentrl/tokenizer"
)

// savePublished writes what the generation servers load as a version: for a model with adapters
// the adapter alone in PEFT's format (the servers, vLLM's LoRA routes, hold the base; writing it
// at every update would cost the base's size each time), otherwise the checkpoint folder.
func savePublished(dir string, m *model.Model, tok *tokenizer.Tokenizer) error {
	if m.HasLoRA() {
		return checkpoint.SaveAdapter(dir, m, "")
	}
	return checkpoint.Save(dir, m, tok, nil)
}

// An RL phase with a lora block trains through an external learner too: the learner holds the
// base frozen and the adapter (the torch learner is started with --adapter on the phase's start
// folder, which holds both), its sampler folders hold the adapter alone in PEFT's format, and its
// state folders the adapter and its moments. The run loads the adapter into its model after
// every update, publishes it (to vLLM through its LoRA routes, or to the local engine) and
// checks the sync with the probe as for full weights.

// checkAdapterLearner refuses a learner that does not train exactly the run's adapter (one that
// reports no parameter count is let through: its first sampler folder is then checked).
func checkAdapterLearner(m *model.Model, c *remote.Client) error {
	if !m.HasLoRA() {
		return nil
	}
	if n := c.Learner().Params; n != 0 && n != int64(len(m.LoRA.Data)) {
		return fmt.Errorf("learner %s trains %d parameters, the phase's LoRA adapter has %d: start it with --adapter on the phase's start folder", c.URL(), n, len(m.LoRA.Data))
	}
	return nil
}

// loadAdapterTensors is loadTensors for a model with adapters: the adapter from dir's
// adapter_model.safetensors and, with state, its moments from optimizer.safetensors into opt.
func loadAdapterTensors(m *model.Model, opt *optim.AdamW, dir string, state bool) error {
	w, _, err := checkpoint.ReadSafetensors(filepath.Join(dir, "adapter_model.safetensors"))
	if err != nil {
		return err
	}
	tensors := m.LoRA.Tensors()
	if len(w) != len(tensors) {
		return fmt.Errorf("adapter_model.safetensors holds %d tensors, the run's adapter %d", len(w), len(tensors))
	}
	for _, t := range tensors {
		if src, ok := w[t.Name]; !ok || len(src.Data) != len(t.Data) {
			return fmt.Errorf("adapter tensor %s is missing or of another size", t.Name)
		}
	}
	var ost optim.State
	if state && opt != nil {
		o, meta, err := checkpoint.ReadSafetensors(filepath.Join(dir, "optimizer.safetensors"))
		if err != nil {
			return err
		}
		step, err := strconv.ParseInt(meta["step"], 10, 64)
		if err != nil || step < 0 {
			return fmt.Errorf("optimizer.safetensors: step %q", meta["step"])
		}
		ost = optim.State{Step: step, M: make([]float32, len(m.LoRA.Data)), V: make([]float32, len(m.LoRA.Data))}
		for _, t := range tensors {
			a, okA := o["exp_avg."+t.Name]
			b, okB := o["exp_avg_sq."+t.Name]
			if !okA || !okB || len(a.Data) != len(t.Data) || len(b.Data) != len(t.Data) {
				return fmt.Errorf("optimizer.safetensors: the moments of %s are missing or of another size", t.Name)
			}
			copy(ost.M[t.Offset:], a.Data)
			copy(ost.V[t.Offset:], b.Data)
		}
	}
	for _, t := range tensors {
		copy(t.Data, w[t.Name].Data)
	}
	if state && opt != nil {
		return opt.LoadState(ost)
	}
	return nil
}
