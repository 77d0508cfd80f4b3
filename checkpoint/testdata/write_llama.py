"""Writes a Llama checkpoint folder the way another tool might (standard library only), for
checkpoint's foreign-load test.

Usage: python3 write_llama.py OUTDIR CONFIG_JSON
CONFIG_JSON gives vocab, dim, layers, heads, kv_heads, hidden, max_seq (untied embeddings).
Differences from our writer, on purpose: tensors stored in reverse alphabetical order, the header
keys in another order with __metadata__ last, no space padding, model.norm.weight in F16 and
one input_layernorm in BF16, and config.json carrying keys other tools write.

Each F32 value is value(t, i) = ((i * 7919 + t * 31) % 1000 - 500) / 1000 * 0.05, with t the
tensor's index in the sorted name list; the half-precision tensors hold 1 + (i % 8) / 128, which
F16 and BF16 represent exactly. The Go test recomputes the same numbers.
"""
import json
import os
import struct
import sys


def shapes(c):
    d, hd = c["dim"], c["dim"] // c["heads"]
    out = {"model.embed_tokens.weight": [c["vocab"], d], "model.norm.weight": [d],
           "lm_head.weight": [c["vocab"], d]}
    for l in range(c["layers"]):
        p = "model.layers.%d." % l
        out[p + "input_layernorm.weight"] = [d]
        out[p + "post_attention_layernorm.weight"] = [d]
        out[p + "self_attn.q_proj.weight"] = [c["heads"] * hd, d]
        out[p + "self_attn.k_proj.weight"] = [c["kv_heads"] * hd, d]
        out[p + "self_attn.v_proj.weight"] = [c["kv_heads"] * hd, d]
        out[p + "self_attn.o_proj.weight"] = [d, c["heads"] * hd]
        out[p + "mlp.gate_proj.weight"] = [c["hidden"], d]
        out[p + "mlp.up_proj.weight"] = [c["hidden"], d]
        out[p + "mlp.down_proj.weight"] = [d, c["hidden"]]
    return out


def encode(name, t, numel):
    if name == "model.norm.weight":
        return "F16", struct.pack("<%de" % numel, *[1 + (i % 8) / 128 for i in range(numel)])
    if name == "model.layers.0.input_layernorm.weight":
        vals = struct.pack("<%df" % numel, *[1 + (i % 8) / 128 for i in range(numel)])
        return "BF16", b"".join(vals[4 * i + 2 : 4 * i + 4] for i in range(numel))
    vals = [((i * 7919 + t * 31) % 1000 - 500) / 1000 * 0.05 for i in range(numel)]
    return "F32", struct.pack("<%df" % numel, *vals)


def main(outdir, cfg_json):
    c = json.loads(cfg_json)
    sh = shapes(c)
    names = sorted(sh)
    header, blobs, pos = {}, [], 0
    for t, name in reversed(list(enumerate(names))):
        numel = 1
        for d in sh[name]:
            numel *= d
        dtype, raw = encode(name, t, numel)
        header[name] = {"data_offsets": [pos, pos + len(raw)], "dtype": dtype, "shape": sh[name]}
        blobs.append(raw)
        pos += len(raw)
    header["__metadata__"] = {"format": "pt", "written_by": "peer"}
    hb = json.dumps(header, separators=(",", ":")).encode()
    os.makedirs(outdir, exist_ok=True)
    with open(os.path.join(outdir, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for b in blobs:
            f.write(b)
    config = {
        "_name_or_path": "peer/llama-tiny",
        "architectures": ["LlamaForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "hidden_act": "silu",
        "hidden_size": c["dim"],
        "initializer_range": 0.02,
        "intermediate_size": c["hidden"],
        "max_position_embeddings": c["max_seq"],
        "mlp_bias": False,
        "model_type": "llama",
        "num_attention_heads": c["heads"],
        "num_hidden_layers": c["layers"],
        "num_key_value_heads": c["kv_heads"],
        "pretraining_tp": 1,
        "rms_norm_eps": 1e-06,
        "rope_scaling": None,
        "rope_theta": 500000.0,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.46.0",
        "use_cache": True,
        "vocab_size": c["vocab"],
    }
    with open(os.path.join(outdir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
