# The sampler write (modeling.write_safetensors, float32) of a Qwen2.5-0.5B-shaped state dict on
# CPU: the old writer (argv[1]) against the new (argv[2]), alternating, in one process.
import json, os, sys, time, torch
import versions  # this folder's: an old and a new tree side by side
if len(sys.argv) < 3:
    sys.exit(__doc__ or "usage: see README.md")
def load(root):
    return versions.load(root, "modeling")
old, new = load(sys.argv[1]), load(sys.argv[2])
assert old.__file__ != new.__file__, (old.__file__, new.__file__)
sys.path.insert(0, sys.argv[2])
from agentrl_learner import bench
c = bench.config("0.5b")
D, I, V, Lr, H, KV = c["hidden_size"], c["intermediate_size"], c["vocab_size"], c["num_hidden_layers"], c["num_attention_heads"], c["num_key_value_heads"]
hd = D // H
sd = {"model.embed_tokens.weight": torch.empty(V, D).fill_(0.01), "model.norm.weight": torch.ones(D)}
for l in range(Lr):
    p = f"model.layers.{l}."
    for n, s in (("self_attn.q_proj.weight", (D, D)), ("self_attn.q_proj.bias", (D,)), ("self_attn.k_proj.weight", (KV * hd, D)),
                 ("self_attn.k_proj.bias", (KV * hd,)), ("self_attn.v_proj.weight", (KV * hd, D)), ("self_attn.v_proj.bias", (KV * hd,)),
                 ("self_attn.o_proj.weight", (D, D)), ("mlp.gate_proj.weight", (I, D)), ("mlp.up_proj.weight", (I, D)),
                 ("mlp.down_proj.weight", (D, I)), ("input_layernorm.weight", (D,)), ("post_attention_layernorm.weight", (D,))):
        sd[p + n] = torch.empty(s).fill_(0.02)
params = sum(t.numel() for t in sd.values())
path = os.path.join(os.environ.get("TMPDIR", "/tmp"), "agentrl-write-ratio.safetensors")
times = {"old": [], "new": []}
for rep in range(3):
    for name, m in (("old", old), ("new", new)):
        t = time.time()
        m.write_safetensors(path, sd, torch.float32, {"format": "pt"})
        times[name].append(time.time() - t)
        os.remove(path)
best = {k: min(v) for k, v in times.items()}
print(json.dumps({"params": params, "bytes": params * 4, "old_s": times["old"], "new_s": times["new"],
                  "old_best_s": best["old"], "new_best_s": best["new"], "new_over_old_time": best["new"] / best["old"]}))
