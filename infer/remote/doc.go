// Package remote is an infer.Generator over HTTP: token ids go to inference servers and token
// ids, their logprobs and policy versions come back, so rollouts can generate on other processes
// and hosts without re-tokenizing anything.
//
// One client speaks three dialects, chosen per server:
//
//   - "agentrl": `agentrl serve`'s training route, POST /agentrl/v1/generate with an
//     infer.Request, answered by an infer.Completion: logprobs under the distribution actually
//     sampled from and the policy version of every token, exactly as the in-process engine gives
//     them (the same seed gives the same tokens).
//   - "vllm": POST /v1/completions with the prompt as token ids, logprobs 0 (the sampled token's),
//     return_token_ids and return_tokens_as_token_ids (vLLM ≥ 0.10.2). vLLM reports no version
//     per token: a completion carries the version last confirmed for that server (SetVersion,
//     called after a weight update succeeded there), or, once the server serves a LoRA adapter
//     the router loaded, the version of the adapter the request named.
//   - "sglang": POST /generate with input_ids and return_logprob (SGLang ≥ 0.4.6); tokens and
//     logprobs come from meta_info.output_token_logprobs, the version from
//     meta_info.weight_version when the server reports one.
//
// A Router spreads requests over servers: least outstanding requests, sticky by Request.Session
// (an episode's turns share a server's prefix cache), a deadline on every call, health checks
// that eject a failing server and re-admit it when it answers again. A call that fails before a
// completion arrived is resubmitted to another server: generation is idempotent until the
// environment sees its output. A completion whose token ids are missing, or whose logprobs do not
// match its tokens one to one, is refused with an error (never zero-padded); so are vLLM logprobs
// taken before temperature, top-k and top-p unless the server is declared to return processed
// logprobs.
//
// Probe checks every server before a run trusts it: what it serves, its release and context
// length, and one generated token through its dialect; a server that answers wrongly is refused,
// one that does not answer is ejected until a health check re-admits it.
//
// PublishWeights sends a trainer's weights to every server: agentrl servers receive the file
// under the router's epoch (Options.Epoch), within which versions only go up, SGLang servers load
// the folder from a shared disk, vLLM servers load the LoRA adapter in it under a versioned name
// through their stock LoRA routes and requests switch to that name (lora.go).
//
// The agentrl dialect's JSON is written and read by infer/wire, without reflection; anything
// outside the shape it reads is left to encoding/json.
//
// It does not start servers or decide what to train on; the trainer does.
package remote
