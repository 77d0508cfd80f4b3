# The learner's own per-request work, old (argv[1]) against new (argv[2]), in one process: a model
# so small (1 layer, width 8, vocabulary 64) that its arithmetic is negligible, and requests of
# many sequences split into many micro-batches (max_tokens 512): wire decode + forward + answer
# encode + wire decode + forward_backward + optim_step per step.
import json, random, sys, tempfile, time, torch
import versions  # this folder's: an old and a new tree side by side
if len(sys.argv) < 6:
    sys.exit(__doc__ or "usage: see README.md")
def load(root):
    return versions.load(root, "learner", "wire", "modeling")
old = load(sys.argv[1]); new = load(sys.argv[2])
seqs, lo, hi = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
cfg = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_act": "silu", "max_position_embeddings": 4096,
       "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 1,
       "num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": 64, "tie_word_embeddings": True, "torch_dtype": "float32"}
torch.manual_seed(0)
tmp = tempfile.mkdtemp()
new[2].save_model(new[2].from_config(cfg), tmp, dtype=torch.float32)
rng = random.Random(0)
batches = []
for _ in range(6):
    offs, toks, mask = [0], [], []
    for _ in range(seqs):
        L = rng.randint(lo, hi); toks += [rng.randrange(64) for _ in range(L)]; mask += [rng.random() < 0.8 for _ in range(L)]; offs.append(len(toks))
    coef = [rng.uniform(-1, 1) / len(toks) for _ in toks]
    w = new[1]
    batches.append((w.encode_request(w.KIND_FORWARD, 0, offs, toks, mask), w.encode_request(w.KIND_FORWARD_BACKWARD, w.A_LOGPROBS, offs, toks, mask, [coef])))
res = {}
for name, (lm, wm, _) in (("old", old), ("new", new)):
    L = lm.Learner(tmp, max_tokens=512)
    def step(f, fb):
        r = wm.decode_request(f, 64); lp, e, v = L.forward(r, False, False, False); ans = wm.encode_answer(len(r.tokens), lp, e, v)
        r = wm.decode_request(fb, 64); L.forward_backward(r); L.optim_step(1e-3, 1.0); return ans
    res[name] = {"L": L, "t": [], "ans": []}
for rep in range(3):
    for name, (lm, wm, _) in (("old", old), ("new", new)):
        L = res[name]["L"]
        t = time.perf_counter()
        for f, fb in batches:
            r = wm.decode_request(f, 64); lp, e, v = L.forward(r, False, False, False); res[name]["ans"].append(wm.encode_answer(len(r.tokens), lp, e, v))
            r = wm.decode_request(fb, 64); L.forward_backward(r); L.optim_step(1e-3, 1.0)
        res[name]["t"].append((time.perf_counter() - t) / len(batches))
same = res["old"]["ans"] == res["new"]["ans"] and all(torch.equal(a.detach(), b.detach()) for a, b in zip(res["old"]["L"].named_tensors().values(), res["new"]["L"].named_tensors().values()))
best = {k: min(v["t"]) for k, v in res.items()}
print(json.dumps({"seqs": seqs, "len": [lo, hi], "old_s_per_step": best["old"], "new_s_per_step": best["new"], "new_over_old_time": best["new"] / best["old"], "bitwise_equal": same}))
