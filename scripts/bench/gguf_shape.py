#!/usr/bin/env python3
"""Write a GGUF file of a Hugging Face config.json's shape with random weights, for llama.cpp's
llama-bench beside `agentrl bench model --shape` (the same shape, random weights both sides).

usage: gguf_shape.py CONFIG_JSON OUT.gguf {bf16,f32} [--gguf-py DIR]

Only numpy and llama.cpp's gguf-py (its source folder, --gguf-py) are needed. The tokenizer is
llama.cpp's "none" vocabulary of vocab_size dummy tokens: llama-bench feeds random token ids and
never detokenizes, so decoding costs the same as with the real tokenizer. Supported: Llama and
SmolLM2 (llama), Qwen2 (q/k/v biases) and Qwen3 (q/k norms, head_dim); tied or untied heads.
"""
import argparse
import json
import sys

import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("config")
    ap.add_argument("out")
    ap.add_argument("dtype", choices=["bf16", "f32"])
    ap.add_argument("--gguf-py", default=None, help="llama.cpp's gguf-py folder")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    if a.gguf_py:
        sys.path.insert(0, a.gguf_py)
    import gguf

    c = json.load(open(a.config))
    mt = c["model_type"]
    arch = {"llama": "llama", "mistral": "llama", "qwen2": "qwen2", "qwen3": "qwen3"}.get(mt)
    if arch is None:
        sys.exit(f"gguf_shape: model_type {mt!r} is not supported")
    dim, layers = c["hidden_size"], c["num_hidden_layers"]
    heads = c["num_attention_heads"]
    kv = c.get("num_key_value_heads", heads)
    hd = c.get("head_dim") or dim // heads
    hidden, vocab = c["intermediate_size"], c["vocab_size"]
    tied = c.get("tie_word_embeddings", False)
    qkv_bias = mt == "qwen2" or c.get("attention_bias", False)

    w = gguf.GGUFWriter(a.out, arch)
    w.add_name(f"random {mt} dim {dim} layers {layers}")
    w.add_context_length(min(c.get("max_position_embeddings", 4096), 8192))
    w.add_embedding_length(dim)
    w.add_block_count(layers)
    w.add_feed_forward_length(hidden)
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_rope_dimension_count(hd)
    w.add_rope_freq_base(float(c.get("rope_theta", 10000.0)))
    w.add_layer_norm_rms_eps(float(c.get("rms_norm_eps", 1e-6)))
    w.add_vocab_size(vocab)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_BF16 if a.dtype == "bf16" else gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model("none")

    rng = np.random.default_rng(a.seed)

    def mat(name, out, inp):
        x = rng.standard_normal((out, inp), dtype=np.float32) * np.float32(0.02)
        if a.dtype == "bf16":
            # Round to nearest even, as the engine's bfloat16 packing does.
            u = x.view(np.uint32)
            u = (u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
            w.add_tensor(name, u.astype(np.uint16), raw_dtype=gguf.GGMLQuantizationType.BF16)
        else:
            w.add_tensor(name, x)

    def vec(name, n, val=None):
        x = np.ones(n, np.float32) if val is None else rng.standard_normal(n, dtype=np.float32) * np.float32(val)
        w.add_tensor(name, x)

    mat("token_embd.weight", vocab, dim)
    vec("output_norm.weight", dim)
    if not tied:
        mat("output.weight", vocab, dim)
    for i in range(layers):
        p = f"blk.{i}."
        vec(p + "attn_norm.weight", dim)
        mat(p + "attn_q.weight", heads * hd, dim)
        mat(p + "attn_k.weight", kv * hd, dim)
        mat(p + "attn_v.weight", kv * hd, dim)
        if qkv_bias:
            vec(p + "attn_q.bias", heads * hd, 0.02)
            vec(p + "attn_k.bias", kv * hd, 0.02)
            vec(p + "attn_v.bias", kv * hd, 0.02)
        mat(p + "attn_output.weight", dim, heads * hd)
        if mt == "qwen3":
            vec(p + "attn_q_norm.weight", hd)
            vec(p + "attn_k_norm.weight", hd)
        vec(p + "ffn_norm.weight", dim)
        mat(p + "ffn_gate.weight", hidden, dim)
        mat(p + "ffn_up.weight", hidden, dim)
        mat(p + "ffn_down.weight", dim, hidden)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
