// Package model is agentrl's built-in policy: a decoder-only Llama-architecture transformer in
// float32 (token embedding; blocks of RMSNorm → causal grouped-query attention with RoPE →
// residual → RMSNorm → SwiGLU MLP → residual; final RMSNorm; LM head, optionally tied to the
// embedding), with a hand-written backward pass and a KV cache for batched decoding.
//
// It follows llm.c's layout: every parameter lives in one flat []float32 (Params.Data) with named
// views in Hugging Face Llama layout, gradients mirror it (Model.Grads), and each layer is a pair
// of kernels in model/kernels whose backward adds into gradients. All matrix products go through
// kernels.Sgemm.
//
// Training runs over packed batches (several sequences per row, attention confined to each
// sequence). Forward returns, per target position, the target's logprob and the entropy of the
// predicted distribution; Backward starts from d(loss)/d(logprob) and d(loss)/d(entropy), which
// is the seam the algorithm library plugs its losses into. TrainCE is plain supervised
// next-token cross entropy on top of the two.
//
// A model may carry a value head (PPO's critic, AddValueHead): value_head.weight and
// value_head.bias after the Llama weights in Params.Data, a linear map from the final-norm hidden
// state to one value per target position. ForwardValues and BackwardValues add it to the seam:
// d(loss)/d(value) trains the head and flows on into the trunk the policy shares. Decoding never
// reads it.
//
// It does not do mixed precision, sampling (the inference engine samples from Step's logits),
// checkpoint files (those build on Params.Tensors), or anything across machines. A Model is not
// safe for concurrent use; it parallelizes internally over the cores it is given (SetWorkers).
package model
