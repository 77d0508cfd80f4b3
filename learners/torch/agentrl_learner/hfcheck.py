"""python -m agentrl_learner.hfcheck: this package's model implementation against transformers.

For each family the learner implements, at its published width with two layers (random weights,
saved as a Hugging Face checkpoint), it loads the checkpoint twice, with ``modeling.load_model``
and with transformers' ``AutoModelForCausalLM``, and compares on the same random token rows:

* float32 (TF32 off; transformers' eager attention): the logits at every position, and the
  gradient of the summed next-token log probabilities with respect to every weight, each as the
  largest difference over the tensor's range; they must agree to float32 rounding;
* bfloat16 (this package's model under bf16 autocast, as the learner runs it; transformers loaded
  in bf16 with its default attention): the next-token log probabilities of each, against the
  float32 ones. The learner's bf16 error must be of the
  same size as transformers' (the ratio is printed).

One JSON line per family; exits 1 when a float32 comparison fails. Written for a CUDA machine
(scripts/gpu-check) where transformers is installed; ``--device cpu`` runs it anywhere it is.
"""

import argparse
import json
import math
import os
import sys
import tempfile

import torch

from . import modeling

# Published shapes (hidden, MLP, heads, KV heads, head_dim, vocab, tied, RoPE), two layers.
FAMILIES = {
    "qwen2.5-0.5b": dict(architectures=["Qwen2ForCausalLM"], model_type="qwen2", hidden_size=896,
                         intermediate_size=4864, num_attention_heads=14, num_key_value_heads=2,
                         vocab_size=151936, tie_word_embeddings=True, rope_theta=1000000.0, rms_norm_eps=1e-6),
    "qwen3-0.6b": dict(architectures=["Qwen3ForCausalLM"], model_type="qwen3", hidden_size=1024,
                       intermediate_size=3072, num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                       vocab_size=151936, tie_word_embeddings=True, rope_theta=1000000.0, rms_norm_eps=1e-6),
    "llama3.2-1b": dict(architectures=["LlamaForCausalLM"], model_type="llama", hidden_size=2048,
                        intermediate_size=8192, num_attention_heads=32, num_key_value_heads=8,
                        vocab_size=128256, tie_word_embeddings=True, rope_theta=500000.0, rms_norm_eps=1e-5,
                        rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                      "high_freq_factor": 4.0, "original_max_position_embeddings": 128}),
    "smollm2-360m": dict(architectures=["LlamaForCausalLM"], model_type="llama", hidden_size=960,
                         intermediate_size=2560, num_attention_heads=15, num_key_value_heads=5,
                         vocab_size=49152, tie_word_embeddings=True, rope_theta=100000.0, rms_norm_eps=1e-5),
    "mistral-7b": dict(architectures=["MistralForCausalLM"], model_type="mistral", hidden_size=4096,
                       intermediate_size=14336, num_attention_heads=32, num_key_value_heads=8,
                       vocab_size=32000, tie_word_embeddings=False, rope_theta=10000.0, rms_norm_eps=1e-5,
                       sliding_window=96),
}


def hf_config(name, layers):
    c = {"hidden_act": "silu", "max_position_embeddings": 4096, "initializer_range": 0.04,
         "num_hidden_layers": layers, "torch_dtype": "float32"}
    c.update(FAMILIES[name])
    return c


def load_hf(path, dtype, attn):
    import transformers

    try:
        return transformers.AutoModelForCausalLM.from_pretrained(path, dtype=dtype, attn_implementation=attn)
    except TypeError:  # transformers before 4.56 names it torch_dtype
        return transformers.AutoModelForCausalLM.from_pretrained(path, torch_dtype=dtype, attn_implementation=attn)


def logits_of(m, tokens):
    out = m(tokens)
    return out.logits if hasattr(out, "logits") else out


def next_logprobs(logits, tokens):
    lp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
    return lp.gather(-1, tokens[:, 1:].unsqueeze(-1)).squeeze(-1)


def rel(a, b):
    """Largest |a-b| over b's range (max |b|), as the Go tests measure it."""
    a, b = a.float(), b.float()
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()


def check(name, layers, rows, seq, device, tol):
    torch.manual_seed(0)
    cfg = hf_config(name, layers)
    res = {"family": name, "layers": layers, "rows": rows, "seq": seq, "device": device}
    with tempfile.TemporaryDirectory(prefix="agentrl-hfcheck-") as d:
        own = modeling.from_config(cfg)
        modeling.save_model(own, d, dtype=torch.float32)
        own = own.to(device)
        hf = load_hf(d, torch.float32, "eager").to(device)
        hf.config.use_cache = False
        tokens = torch.randint(0, cfg["vocab_size"], (rows, seq), device=device)

        # float32: logits and every weight's gradient.
        lo, lh = logits_of(own, tokens), logits_of(hf, tokens)
        res["f32_logits_rel"] = rel(lo, lh)
        fo, fh = next_logprobs(lo, tokens), next_logprobs(lh, tokens)
        res["f32_logprob_maxabs"] = (fo - fh).abs().max().item()
        fo.sum().backward()
        fh.sum().backward()
        hp = dict(hf.named_parameters())
        worst, worst_name, compared = 0.0, "", 0
        for n, p in own.named_parameters():
            q = hp.get(n)
            if q is None or q.grad is None:
                raise SystemExit(f"{name}: transformers has no gradient of {n}")
            r = rel(p.grad, q.grad)
            compared += 1
            if r > worst:
                worst, worst_name = r, n
        res["f32_grad_rel"], res["f32_grad_worst"], res["grads_compared"] = worst, worst_name, compared
        ref = fh.detach()
        del lo, lh, fo, fh
        own.zero_grad(set_to_none=True)
        hf.zero_grad(set_to_none=True)
        del hf

        # bfloat16: each implementation's error against the float32 reference (on CUDA, where
        # the learner runs bf16 autocast).
        if not device.startswith("cuda"):
            res["ok"] = res["f32_logits_rel"] <= tol and res["f32_grad_rel"] <= 10 * tol
            return res
        with torch.no_grad():
            with torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16):
                bo = next_logprobs(logits_of(own, tokens), tokens)  # the learner's bf16: autocast
            del own
            hf16 = load_hf(d, torch.bfloat16, "sdpa").to(device)
            bh = next_logprobs(logits_of(hf16, tokens), tokens)
            del hf16
        res["bf16_own_vs_f32_meanabs"] = (bo - ref).abs().mean().item()
        res["bf16_hf_vs_f32_meanabs"] = (bh - ref).abs().mean().item()
        res["bf16_own_vs_hf_meanabs"] = (bo - bh).abs().mean().item()
        res["bf16_error_ratio"] = res["bf16_own_vs_f32_meanabs"] / max(res["bf16_hf_vs_f32_meanabs"], 1e-30)
    res["ok"] = res["f32_logits_rel"] <= tol and res["f32_grad_rel"] <= 10 * tol and math.isfinite(res["bf16_error_ratio"])
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    return res


def main(argv=None):
    ap = argparse.ArgumentParser(prog="agentrl_learner.hfcheck")
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--rows", type=int, default=2)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--tol", type=float, default=1e-4, help="float32 logits, relative to their range (gradients: 10x)")
    a = ap.parse_args(argv)
    if a.device.startswith("cuda"):
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    import transformers

    print(f"hfcheck: transformers {transformers.__version__}, torch {torch.__version__}", file=sys.stderr)
    failed = False
    for name in a.families.split(","):
        try:
            r = check(name, a.layers, a.rows, a.seq, a.device, a.tol)
        except Exception as e:  # one family's failure is reported; the others still run
            r = {"family": name, "ok": False, "error": f"{type(e).__name__}: {e}"[:600]}
        failed |= not r["ok"]
        print(json.dumps(r), flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
