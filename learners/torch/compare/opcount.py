# ATen operator counts per request, old (argv[1]) against new (argv[2]): the tiny bench model
# (0.13M parameters, 26 tensors), a request of 16 sequences of 64-256 tokens, max_tokens 1024
# (so several micro-batches). _local_scalar_dense is a value read on the host (.item(), float(),
# bool(), int()): a device synchronization on a GPU; _to_copy/copy_ the host<->device copies there.
import collections, json, random, sys, tempfile, torch
import versions  # this folder's: an old and a new tree side by side
from torch.autograd import profiler
if len(sys.argv) < 3:
    sys.exit(__doc__ or "usage: see README.md")
def load(root):
    return versions.load(root, "learner", "wire", "modeling", "bench")
out = {}
for name, root in (("old", sys.argv[1]), ("new", sys.argv[2])):
    lm, wm, md, bm = load(root)
    torch.manual_seed(0)
    tmp = tempfile.mkdtemp(); md.save_model(md.from_config(bm.config("tiny")), tmp)
    L = lm.Learner(tmp, max_tokens=1024)
    offs, toks, mask, coef = bm.batches(512, 1, 16, 64, 256)[0]
    f = wm.encode_request(wm.KIND_FORWARD, 0, offs, toks, mask)
    fb = wm.encode_request(wm.KIND_FORWARD_BACKWARD, wm.A_LOGPROBS, offs, toks, mask, [coef])
    groups = len(L._microbatches(wm.decode_request(f, 512)))
    res = {"micro_batches": groups}
    for what, fn in (("forward", lambda: L.forward(wm.decode_request(f, 512), False, False, False)),
                     ("forward_backward", lambda: L.forward_backward(wm.decode_request(fb, 512))),
                     ("optim_step", lambda: L.optim_step(1e-3, 1.0))):
        with profiler.profile() as p:
            fn()
        c = collections.Counter(e.name for e in p.function_events)
        top = [e for e in p.function_events if e.cpu_parent is None]
        res[what] = {"top_level_ops": len(top), "host_reads": c["aten::_local_scalar_dense"]}
    out[name] = res
print(json.dumps(out))
