# Learner.optim_step, old (argv[1]) against new (argv[2]), on the bench's "mid" model (CPU), in one
# process, alternating; same gradients; checks the weights agree bitwise.
import json, os, sys, tempfile, time, torch
import versions  # this folder's: an old and a new tree side by side
if len(sys.argv) < 3:
    sys.exit(__doc__ or "usage: see README.md")
def load(root):
    return versions.load(root, "learner", "bench")
old, bench = load(sys.argv[1])
new, _ = load(sys.argv[2])
size = sys.argv[3] if len(sys.argv) > 3 else "mid"
torch.manual_seed(0)
tmp = tempfile.mkdtemp()
sys.path.insert(0, sys.argv[2])
from agentrl_learner import modeling
# "mid": ~21.7M parameters in 74 tensors (Qwen2-shaped, width 384, 6 layers, vocabulary 32,000)
MID = dict(hidden_size=384, intermediate_size=1024, num_hidden_layers=6, num_attention_heads=6,
           num_key_value_heads=2, vocab_size=32000, tie_word_embeddings=True)
cfg = bench.config("tiny")
cfg.update(MID) if size == "mid" else cfg.update(bench.config(size))
modeling.save_model(modeling.from_config(cfg), tmp, dtype=torch.float32)
Ls = {"old": old.Learner(tmp, weight_decay=0.01), "new": new.Learner(tmp, weight_decay=0.01)}
times = {"old": [], "new": []}
for rep in range(8):
    gen = torch.Generator().manual_seed(rep)
    grads = {n: torch.randn(p.shape, generator=gen) * 1e-3 for n, p in Ls["old"].named_tensors().items()}
    for name, L in Ls.items():
        for n, p in L.named_tensors().items():
            p.grad = grads[n].clone()
        t = time.perf_counter()
        L.optim_step(1e-4, 1.0)
        times[name].append(time.perf_counter() - t)
same = all(torch.equal(a.detach().view(torch.int32), b.detach().view(torch.int32))
           for a, b in zip(Ls["old"].named_tensors().values(), Ls["new"].named_tensors().values()))
med = {k: sorted(v[1:])[len(v[1:]) // 2] for k, v in times.items()}
print(json.dumps({"size": size, "params": Ls["new"].num_params(), "tensors": len(Ls["new"].named_tensors()),
                  "old_median_s": med["old"], "new_median_s": med["new"], "new_over_old_time": med["new"] / med["old"],
                  "bitwise_equal_weights": same}))
