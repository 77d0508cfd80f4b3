"""Plain-PyTorch decoder-only transformers for the model families agentrl runs.

One module covers Llama 1/2/3.x (with Llama 3.1/3.2's ``rope_type: llama3``), Qwen2/2.5
(biases on q/k/v), Qwen3 dense (RMSNorm on q and k per head, ``head_dim`` free of
hidden/heads), Mistral (sliding-window attention) and SmolLM2 (Llama with tied embeddings).
It reads a Hugging Face ``config.json`` and safetensors checkpoint (one file or sharded with
``model.safetensors.index.json``; f32, f16 or bf16) and needs nothing but PyTorch: no
``transformers``, no ``safetensors`` package. Written to be read beside the Go engine
(``model``) as an independent implementation of the same arithmetic; it follows Hugging
Face's modeling code, not the Go engine's.

Public API (stable):
    from_config(config: dict) -> Transformer        random weights, HF config.json dict
    load_model(path: str) -> Transformer             config.json + safetensors from a folder
    Transformer.forward(input_ids[B, T]) -> logits[B, T, V]   (float32)
    read_safetensors(path) -> dict[str, Tensor]; write_safetensors(path, tensors)
    save_model(model, path, dtype=None)              config.json + model.safetensors
"""

import json
import math
import os
import struct

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = [
    "ModelArgs",
    "Transformer",
    "from_config",
    "load_model",
    "save_model",
    "read_safetensors",
    "write_safetensors",
    "state_dict_names",
    "load_adapter",
]

# ---------------------------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------------------------

_ARCHITECTURES = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "mistral",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
}

class ModelArgs:
    """The settings of one model, read from a Hugging Face config.json dict."""

    def __init__(self, cfg):
        cfg = dict(cfg)
        archs = cfg.get("architectures") or []
        mt = cfg.get("model_type")
        family = None
        for a in archs:
            if a in _ARCHITECTURES:
                family = _ARCHITECTURES[a]
        if family is None and mt in ("llama", "mistral", "qwen2", "qwen3"):
            family = mt
        if family is None:
            raise ValueError(f"unsupported architecture {archs or mt!r}")
        if mt is not None and mt != family:
            raise ValueError(f"model_type {mt!r} contradicts architectures {archs!r}")
        self.family = family
        self.vocab_size = int(cfg["vocab_size"])
        self.dim = int(cfg["hidden_size"])
        self.hidden = int(cfg["intermediate_size"])
        self.n_layers = int(cfg["num_hidden_layers"])
        self.n_heads = int(cfg["num_attention_heads"])
        self.n_kv_heads = int(cfg.get("num_key_value_heads") or self.n_heads)
        hd = cfg.get("head_dim")
        self.head_dim = int(hd) if hd is not None else self.dim // self.n_heads
        self.norm_eps = float(cfg.get("rms_norm_eps", 1e-6))
        self.rope_theta = float(cfg.get("rope_theta", 10000.0))
        # transformers' default is untied for all four families.
        self.tie_embeddings = bool(cfg.get("tie_word_embeddings", False))
        act = cfg.get("hidden_act", "silu")
        if act != "silu":
            raise ValueError(f"hidden_act {act!r} is not supported (only silu)")

        # Biases: Llama/Qwen3 attention_bias puts a bias on q, k, v and o; Qwen2 always has
        # biases on q, k and v only; mlp_bias (Llama) on gate, up and down.
        attention_bias = bool(cfg.get("attention_bias", False))
        if family == "qwen2":
            if "attention_bias" in cfg:
                raise ValueError("attention_bias is not a Qwen2 setting (q/k/v always have biases)")
            self.qkv_bias, self.o_bias = True, False
        elif family == "mistral":
            if attention_bias:
                raise ValueError("attention_bias is not supported on mistral")
            self.qkv_bias = self.o_bias = False
        else:
            self.qkv_bias = self.o_bias = attention_bias
        self.mlp_bias = bool(cfg.get("mlp_bias", False))
        if self.mlp_bias and family != "llama":
            raise ValueError(f"mlp_bias is not supported on {family}")
        self.qk_norm = family == "qwen3"

        # RoPE scaling.
        self.rope_scaling = None
        rs = cfg.get("rope_scaling")
        if rs is not None:
            rt = rs.get("rope_type", rs.get("type"))
            if rt == "llama3":
                self.rope_scaling = {
                    "factor": float(rs["factor"]),
                    "low_freq_factor": float(rs["low_freq_factor"]),
                    "high_freq_factor": float(rs["high_freq_factor"]),
                    "original_max_position_embeddings": int(rs["original_max_position_embeddings"]),
                }
            elif rt != "default":
                raise ValueError(f"rope_scaling rope_type {rt!r} is not supported")

        # Sliding window: per layer, None (full attention) or the window length W, where query
        # i sees keys j with i - W < j <= i.
        self.windows = [None] * self.n_layers
        sw = cfg.get("sliding_window")
        if family == "mistral":
            if sw is not None:
                self.windows = [int(sw)] * self.n_layers
        elif family in ("qwen2", "qwen3"):
            if cfg.get("use_sliding_window", False) and sw is not None:
                mwl = int(cfg.get("max_window_layers", self.n_layers))
                self.windows = [int(sw) if i >= mwl else None for i in range(self.n_layers)]
        elif sw is not None:
            raise ValueError(f"sliding_window is not supported on {family}")

        # Other keys (token ids, dtype, initializer_range, ...) do not change the arithmetic.
        for k in cfg:
            if k.startswith("num_experts") or k in ("moe_intermediate_size", "decoder_sparse_step",
                                                     "mlp_only_layers", "norm_topk_prob",
                                                     "shared_expert_intermediate_size"):
                if k == "num_experts" and not cfg[k]:
                    continue
                raise ValueError(f"{k} (mixture of experts) is not supported")
            if k == "quantization_config":
                raise ValueError("quantization_config is not supported")
        self.config = cfg


# ---------------------------------------------------------------------------------------------
# Layers
# ---------------------------------------------------------------------------------------------


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        var = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(var + self.eps))


def rope_inv_freq(args):
    """The inverse frequencies of RoPE, Llama 3's scaling applied when configured."""
    d = args.head_dim
    inv_freq = 1.0 / (args.rope_theta ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
    rs = args.rope_scaling
    if rs is None:
        return inv_freq
    factor, lo, hi = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
    old = rs["original_max_position_embeddings"]
    low_freq_wavelen, high_freq_wavelen = old / lo, old / hi
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (old / wavelen - lo) / (hi - lo)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < high_freq_wavelen) & ~(wavelen > low_freq_wavelen)
    return torch.where(medium, smoothed, scaled)


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(x, cos, sin):
    """x: [B, H, T, D]; cos, sin: [T, D]."""
    return x * cos + rotate_half(x) * sin


class Attention(nn.Module):
    def __init__(self, args, layer):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = args.n_heads, args.n_kv_heads, args.head_dim
        self.window = args.windows[layer]
        self.q_proj = nn.Linear(args.dim, args.n_heads * args.head_dim, bias=args.qkv_bias)
        self.k_proj = nn.Linear(args.dim, args.n_kv_heads * args.head_dim, bias=args.qkv_bias)
        self.v_proj = nn.Linear(args.dim, args.n_kv_heads * args.head_dim, bias=args.qkv_bias)
        self.o_proj = nn.Linear(args.n_heads * args.head_dim, args.dim, bias=args.o_bias)
        if args.qk_norm:
            self.q_norm = RMSNorm(args.head_dim, args.norm_eps)
            self.k_norm = RMSNorm(args.head_dim, args.norm_eps)
        else:
            self.q_norm = self.k_norm = None

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.n_heads, self.head_dim)
        k = self.k_proj(x).view(B, T, self.n_kv_heads, self.head_dim)
        v = self.v_proj(x).view(B, T, self.n_kv_heads, self.head_dim)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        rep = self.n_heads // self.n_kv_heads
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)

        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        i = torch.arange(T, device=x.device).view(T, 1)
        j = torch.arange(T, device=x.device).view(1, T)
        allowed = j <= i
        if self.window is not None:
            allowed = allowed & (i - j < self.window)
        scores = scores.masked_fill(~allowed, float("-inf"))
        out = F.softmax(scores, dim=-1) @ v
        out = out.transpose(1, 2).reshape(B, T, self.n_heads * self.head_dim)
        return self.o_proj(out)


class MLP(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.gate_proj = nn.Linear(args.dim, args.hidden, bias=args.mlp_bias)
        self.up_proj = nn.Linear(args.dim, args.hidden, bias=args.mlp_bias)
        self.down_proj = nn.Linear(args.hidden, args.dim, bias=args.mlp_bias)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    def __init__(self, args, layer):
        super().__init__()
        self.input_layernorm = RMSNorm(args.dim, args.norm_eps)
        self.self_attn = Attention(args, layer)
        self.post_attention_layernorm = RMSNorm(args.dim, args.norm_eps)
        self.mlp = MLP(args)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Body(nn.Module):
    """HF's ``model.`` prefix: embeddings, blocks and the final norm."""

    def __init__(self, args):
        super().__init__()
        self.embed_tokens = nn.Embedding(args.vocab_size, args.dim)
        self.layers = nn.ModuleList([Block(args, i) for i in range(args.n_layers)])
        self.norm = RMSNorm(args.dim, args.norm_eps)


class Transformer(nn.Module):
    """A decoder-only transformer whose state_dict uses Hugging Face's tensor names."""

    def __init__(self, args):
        super().__init__()
        if not isinstance(args, ModelArgs):
            args = ModelArgs(args)
        self.args = args
        self.model = Body(args)
        if args.tie_embeddings:
            self.lm_head = None
        else:
            self.lm_head = nn.Linear(args.dim, args.vocab_size, bias=False)
        self.register_buffer("inv_freq", rope_inv_freq(args), persistent=False)

    def rope(self, T):
        pos = torch.arange(T, dtype=torch.float32, device=self.inv_freq.device)
        freqs = torch.outer(pos, self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos(), emb.sin()

    def hidden_states(self, input_ids):
        x = self.model.embed_tokens(input_ids)
        cos, sin = self.rope(input_ids.shape[1])
        for block in self.model.layers:
            x = block(x, cos, sin)
        return self.model.norm(x)

    def forward(self, input_ids):
        h = self.hidden_states(input_ids)
        if self.lm_head is None:
            return h @ self.model.embed_tokens.weight.t()
        return self.lm_head(h)


def state_dict_names(model):
    """The tensor names a checkpoint of model holds (lm_head.weight absent when tied)."""
    return list(model.state_dict().keys())


def from_config(config):
    """A model of the given config.json dict with random weights (HF-like initialization)."""
    args = ModelArgs(config)
    m = Transformer(args)
    std = float(config.get("initializer_range", 0.02))
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            elif name.endswith(".bias"):
                p.zero_()
            else:
                p.normal_(0.0, std)
    return m


# ---------------------------------------------------------------------------------------------
# Safetensors (the format is an 8-byte little-endian header length, a JSON header, then data)
# ---------------------------------------------------------------------------------------------

_DTYPES = {"F32": (torch.float32, 4), "F16": (torch.float16, 2), "BF16": (torch.bfloat16, 2)}
_NAMES = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16"}


def read_safetensors(path):
    """All tensors of one safetensors file, as float32 tensors, by name."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError(f"{path}: too short for a safetensors header")
    (n,) = struct.unpack("<Q", raw[:8])
    if 8 + n > len(raw):
        raise ValueError(f"{path}: header length {n} runs past the end of the file")
    header = json.loads(raw[8 : 8 + n])
    data = raw[8 + n :]
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        if e["dtype"] not in _DTYPES:
            raise ValueError(f"{path}: tensor {name}: dtype {e['dtype']} is not supported")
        dtype, size = _DTYPES[e["dtype"]]
        start, end = e["data_offsets"]
        shape = list(e["shape"])
        if end > len(data) or end - start != math.prod(shape) * size:
            raise ValueError(f"{path}: tensor {name}: data offsets {start}..{end} do not fit")
        buf = bytearray(data[start:end])
        if dtype is torch.bfloat16:
            # bf16 is the top half of an f32: widen through int32 to stay exact.
            i16 = torch.frombuffer(buf, dtype=torch.int16).to(torch.int32) & 0xFFFF
            t = (i16 << 16).view(torch.float32) if len(buf) else torch.zeros(0)
        else:
            t = torch.frombuffer(buf, dtype=dtype) if len(buf) else torch.zeros(0, dtype=dtype)
        out[name] = t.float().reshape(shape).clone()
    return out


def write_safetensors(path, tensors, dtype=torch.float32, metadata=None):
    """Writes tensors (name -> tensor) to path in the given dtype (f32, f16 or bf16), each
    written from its own memory (a tensor already in dtype on the CPU is not copied)."""
    header, views, off = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().to("cpu", dtype).contiguous()
        n = t.numel() * t.element_size()
        header[name] = {"dtype": _NAMES[dtype], "shape": list(t.shape), "data_offsets": [off, off + n]}
        if n:
            # numpy has no bfloat16: its bytes, as int16
            views.append(memoryview((t.view(torch.int16) if dtype is torch.bfloat16 else t).numpy()).cast("B"))
        off += n
    if metadata:
        header["__metadata__"] = dict(metadata)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in views:
            f.write(b)


def _read_checkpoint(path):
    index = os.path.join(path, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            wm = json.load(f)["weight_map"]
        out = {}
        for file in sorted(set(wm.values())):
            part = read_safetensors(os.path.join(path, file))
            for name, t in part.items():
                if wm.get(name) != file:
                    raise ValueError(f"{file}: tensor {name} is not in the index for this file")
                out[name] = t
        missing = [n for n in wm if n not in out]
        if missing:
            raise ValueError(f"index names tensors absent from their shards: {missing[:5]}")
        return out
    return read_safetensors(os.path.join(path, "model.safetensors"))


def load_model(path):
    """The model in folder path: config.json plus model.safetensors or sharded safetensors."""
    with open(os.path.join(path, "config.json")) as f:
        cfg = json.load(f)
    m = Transformer(ModelArgs(cfg))
    sd = _read_checkpoint(path)
    want = m.state_dict()
    missing = [n for n in want if n not in sd]
    extra = [n for n in sd if n not in want]
    if missing or extra:
        raise ValueError(f"checkpoint tensors differ from the config: missing {missing[:5]}, unexpected {extra[:5]}")
    for n, t in sd.items():
        if tuple(t.shape) != tuple(want[n].shape):
            raise ValueError(f"tensor {n}: shape {list(t.shape)}, config.json gives {list(want[n].shape)}")
    m.load_state_dict(sd)
    return m


def save_model(model, path, dtype=torch.float32):
    """Writes config.json and model.safetensors of model into folder path."""
    os.makedirs(path, exist_ok=True)
    cfg = dict(model.args.config)
    cfg["torch_dtype"] = {torch.float32: "float32", torch.float16: "float16",
                          torch.bfloat16: "bfloat16"}[dtype]
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    write_safetensors(os.path.join(path, "model.safetensors"), model.state_dict(), dtype,
                      {"format": "pt"})


# ---------------------------------------------------------------------------------------------
# LoRA adapters in PEFT's format
# ---------------------------------------------------------------------------------------------


def load_adapter(model, path):
    """Merges the PEFT LoRA adapter in folder path into model's weights: for each target module,
    W += (lora_alpha / r) * lora_B @ lora_A, reading adapter_config.json and
    adapter_model.safetensors (tensor names base_model.model.<module>.lora_A.weight)."""
    with open(os.path.join(path, "adapter_config.json")) as f:
        cfg = json.load(f)
    if cfg.get("peft_type") != "LORA" or cfg.get("use_dora") or cfg.get("use_rslora"):
        raise ValueError("only plain LoRA adapters are supported")
    scale = float(cfg["lora_alpha"]) / int(cfg["r"])
    targets = set(cfg["target_modules"])
    tensors = read_safetensors(os.path.join(path, "adapter_model.safetensors"))
    params = dict(model.named_parameters())
    merged = 0
    with torch.no_grad():
        for name, a in tensors.items():
            if not name.endswith(".lora_A.weight"):
                continue
            module = name[len("base_model.model."):-len(".lora_A.weight")]
            if module.split(".")[-1] not in targets:
                raise ValueError(f"adapter tensor {name} is not on a target module")
            b = tensors[name.replace("lora_A", "lora_B")]
            w = params[module + ".weight"]
            w += scale * (b @ a)
            merged += 1
    if 2 * merged != len(tensors):
        raise ValueError("adapter tensors do not pair up as lora_A and lora_B")
    return model
