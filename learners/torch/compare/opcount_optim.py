# ATen operators launched by one optim_step, old (argv[1]) against new (argv[2]), on a model with
# Qwen2.5-0.5B's tensor list (24 layers, tied embeddings: 290 tensors) at width 64.
import json, sys, tempfile, torch
import versions  # this folder's: an old and a new tree side by side
from torch.autograd import profiler
if len(sys.argv) < 3:
    sys.exit(__doc__ or "usage: see README.md")
def load(root):
    return versions.load(root, "learner", "modeling", "bench")
out = {}
for name, root in (("old", sys.argv[1]), ("new", sys.argv[2])):
    lm, md, bm = load(root)
    cfg = bm.config("tiny"); cfg["num_hidden_layers"] = 24
    torch.manual_seed(0)
    tmp = tempfile.mkdtemp(); md.save_model(md.from_config(cfg), tmp)
    L = lm.Learner(tmp)
    for p in L.named_tensors().values():
        p.grad = torch.randn(p.shape) * 1e-3
    with profiler.profile() as p:
        L.optim_step(1e-3, 1.0)
    out[name] = {"tensors": len(L.named_tensors()), "ops": len([e for e in p.function_events if e.cpu_parent is None])}
print(json.dumps(out))
