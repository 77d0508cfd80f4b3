// Package checkpoint saves and loads model checkpoints as Hugging Face-style folders that other
// stacks (transformers' LlamaForCausalLM, vLLM) load as they are, plus what a training run needs
// to resume.
//
// A checkpoint folder holds:
//
//	model.safetensors        weights under Hugging Face Llama names, float32
//	config.json              LlamaConfig (architecture, special token ids)
//	generation_config.json   eos/pad ids and plain sampling
//	tokenizer.json           written by tokenizer.Save
//	tokenizer_config.json    written by tokenizer.Save
//	optimizer.safetensors    AdamW moments, "exp_avg.<name>" / "exp_avg_sq.<name>" (resume only)
//	value_head.safetensors   the policy's value head (PPO's critic), "value_head.weight" (1, hidden)
//	                         and "value_head.bias" (1), when the model has one (resume only)
//	trainer_state.json       format version and the caller's opaque Extra (resume only)
//
// The value head lives in a file of its own, not in model.safetensors, so that model.safetensors
// stays exactly a Llama checkpoint (transformers and vLLM would warn about or refuse an unknown
// tensor there), and it is written only with the resume state: it is training state, like the
// moments, and a weights-only folder (the best policy, a published version) is what inference
// servers load, some of which (vLLM, without an index file) read every *.safetensors in a folder.
//
// Save is atomic at the folder level: it writes a temporary sibling folder, fsyncs it, and
// renames it onto the target, so a crash leaves either the old checkpoint or the new one (in
// the instant between renaming the old one away and the new one in, the old one sits at a
// hidden ".<name>.old-*" sibling, which the next Save of that folder moves back; Load does not
// look for it).
// Load and LoadModel also read Llama folders written by other tools (any tensor order, header
// padding, F16/BF16 weights converted to float32, extra config keys), and refuse configs that
// would make this model compute something different from transformers (rope_scaling, an
// activation other than silu, biases, quantization), naming the key.
//
// It does not shard (one model.safetensors file; transformers' model.safetensors.index.json is
// not read or written), write half precision, keep several checkpoints or choose which to keep
// (the pipeline does), or make concurrent Saves to one folder safe: one writer per folder.
// ReadSafetensors and WriteSafetensors are exported for other packages that need the format.
package checkpoint
