"""python -m agentrl_learner.bench: the learner's throughput against a plain PyTorch loop.

For each model size it writes a random Qwen2.5-shaped checkpoint, starts the learner
(``python -m agentrl_learner``) on it, and times through the protocol, on the same random batches:
forward (the proximal logprobs) + forward_backward + optim_step per step, and save_for_sampler (a
weight sync's write). Then it times a plain PyTorch loop on the same model and batches: bf16
autocast forward, the same logprob surrogate, backward with gradient accumulation over the
learner's micro-batches (the same memory bound), torch.optim.AdamW. It prints one JSON
line per size with tokens/s of both and their ratio. Written for a CUDA machine
(scripts/gpu-check); ``--device cpu --sizes tiny`` runs it anywhere.
"""

import argparse
import contextlib
import http.client
import json
import os
import random
import subprocess
import sys
import tempfile
import time

import torch

from . import modeling, wire
from .learner import microbatch_groups

SIZES = {
    # Qwen2.5-0.5B and 1.5B shapes (random weights), and a tiny one for CPU smoke runs.
    "0.5b": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                 num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True),
    "1.5b": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                 num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True),
    "tiny": dict(hidden_size=64, intermediate_size=192, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=512, tie_word_embeddings=True),
}


def config(size):
    c = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_act": "silu",
         "max_position_embeddings": 32768, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
         "initializer_range": 0.02, "torch_dtype": "bfloat16"}
    c.update(SIZES[size])
    return c


def batches(vocab, n, seqs, lo, hi, seed=0):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        toks, offs, mask = [], [0], []
        for _ in range(seqs):
            L = rng.randint(lo, hi)
            p = L // 4
            toks += [rng.randrange(vocab) for _ in range(L)]
            mask += [False] * p + [True] * (L - p)
            offs.append(len(toks))
        coef = [(-1.0 / len(toks)) if m else 0.0 for m in mask]
        for o in offs[:-1]:
            coef[o] = 0.0
        out.append((offs, toks, mask, coef))
    return out


class Client:
    def __init__(self, host, port, timeout):
        self.conn = http.client.HTTPConnection(host, port, timeout=timeout)
        self.conn.request("GET", "/v1/info")
        r = self.conn.getresponse()
        info = json.loads(r.read())
        self.epoch, self.steps = info["epoch"], info["steps"]

    def post(self, path, body, ctype):
        self.conn.request("POST", path, body=body, headers={"Content-Type": ctype, "Agentrl-Learner-Epoch": str(self.epoch)})
        r = self.conn.getresponse()
        data = r.read()
        if r.status != 200:
            raise RuntimeError(f"{path}: {r.status} {data[:300]!r}")
        return data

    def step(self, b, lr=1e-5):
        offs, toks, mask, coef = b
        self.post("/v1/forward", wire.encode_request(wire.KIND_FORWARD, 0, offs, toks, mask), "application/octet-stream")
        self.post("/v1/forward_backward", wire.encode_request(wire.KIND_FORWARD_BACKWARD, wire.A_LOGPROBS, offs, toks, mask, [coef]),
                  "application/octet-stream")
        ans = json.loads(self.post("/v1/optim_step", json.dumps({"steps": self.steps, "lr": lr, "grad_clip": 1.0}).encode(), "application/json"))
        self.steps = ans["steps"]

    def sync(self, dir, version):
        t = time.time()
        self.post("/v1/save_for_sampler", json.dumps({"version": version, "dir": dir}).encode(), "application/json")
        return time.time() - t


def autocast(bf16):
    return torch.autocast("cuda", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()


def microbatches(offs, max_tokens):
    """The learner's grouping of the sequences into micro-batches."""
    return microbatch_groups([b - a for a, b in zip(offs, offs[1:])], max_tokens)


def padded(offs, toks, coef, idx, device):
    L = max(offs[i + 1] - offs[i] for i in idx) - 1
    inp = torch.zeros(len(idx), L, dtype=torch.long)
    tgt = torch.zeros(len(idx), L, dtype=torch.long)
    c = torch.zeros(len(idx), L)
    for r, i in enumerate(idx):
        a, b = offs[i], offs[i + 1]
        inp[r, : b - a - 1] = torch.tensor(toks[a : b - 1])
        tgt[r, : b - a - 1] = torch.tensor(toks[a + 1 : b])
        c[r, : b - a - 1] = torch.tensor(coef[a + 1 : b])
    return inp.to(device), tgt.to(device), c.to(device)


def plain_loop(model_dir, bs, device, bf16, max_tokens, lr=1e-5):
    """The same work as a plain PyTorch loop with gradient accumulation over the same
    micro-batches (the same memory bound): a no-grad forward of every micro-batch (the proximal
    logprobs), then forward + backward of each, clipping and torch.optim.AdamW. Returns seconds
    per step after one warm-up step."""
    m = modeling.load_model(model_dir).to(device)
    opt = torch.optim.AdamW(m.parameters(), lr=lr, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.0)
    times = []
    for k, (offs, toks, mask, coef) in enumerate(bs):
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        t = time.time()
        groups = [padded(offs, toks, coef, idx, device) for idx in microbatches(offs, max_tokens)]
        with torch.no_grad(), autocast(bf16):
            for inp, tgt, c in groups:
                logits = m(inp)
                torch.log_softmax(logits.float(), -1).gather(-1, tgt.unsqueeze(-1))
        for inp, tgt, c in groups:
            with autocast(bf16):
                logits = m(inp)
            lp = torch.log_softmax(logits.float(), -1).gather(-1, tgt.unsqueeze(-1)).squeeze(-1)
            (c * lp).sum().backward()
        del logits, lp
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        if k > 0:
            times.append(time.time() - t)
    del m, opt
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    return sum(times) / len(times)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="agentrl_learner.bench")
    ap.add_argument("--sizes", default="0.5b,1.5b")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--seqs", type=int, default=16)
    ap.add_argument("--min-len", type=int, default=256)
    ap.add_argument("--max-len", type=int, default=1024)
    ap.add_argument("--max-tokens", type=int, default=16384)
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--fsdp", type=int, default=0, help="run the learner under torchrun on this many GPUs with --fsdp (FSDP2)")
    a = ap.parse_args(argv)
    bf16 = a.device.startswith("cuda")
    for size in a.sizes.split(","):
        with tempfile.TemporaryDirectory(prefix="agentrl-bench-") as tmp:
            mdir = os.path.join(tmp, "model")
            torch.manual_seed(0)
            cfg = config(size)
            modeling.save_model(modeling.from_config(cfg), mdir, dtype=torch.bfloat16)
            bs = batches(cfg["vocab_size"], a.steps, a.seqs, a.min_len, a.max_len)
            tokens = sum(sum(m for m in b[2]) for b in bs[1:])
            ready = os.path.join(tmp, "ready")
            log = open(os.path.join(tmp, "learner.log"), "w")
            launcher = [sys.executable]
            if a.fsdp > 0:
                launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(a.fsdp)]
            cmd = launcher + ["-m", "agentrl_learner", "--listen", "127.0.0.1:0", "--ready-file", ready,
                   "--model", mdir, "--device", a.device, "--max-tokens", str(a.max_tokens), "--beta2", "0.99"]
            if bf16:
                cmd.append("--bf16")
            if a.fsdp > 0:
                cmd.append("--fsdp")
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
            try:
                t0 = time.time()
                while not os.path.exists(ready):
                    if proc.poll() is not None or time.time() - t0 > a.timeout:
                        log.flush()
                        raise RuntimeError("the learner did not start: " + open(log.name).read()[-2000:])
                    time.sleep(0.1)
                host, port = open(ready).read().strip().rsplit(":", 1)
                c = Client(host, int(port), a.timeout)
                c.step(bs[0])  # warm-up
                t = time.time()
                for b in bs[1:]:
                    c.step(b)
                learner_s = (time.time() - t) / (len(bs) - 1)
                sync_s = c.sync(os.path.join(tmp, "sampler", "v1"), 1)
            finally:
                proc.terminate()
                proc.wait(timeout=60)
                log.close()
            plain_s = plain_loop(mdir, bs, a.device, bf16, a.max_tokens)
            per = tokens / (len(bs) - 1)
            print(json.dumps({"size": size, "device": a.device, "fsdp_ranks": a.fsdp, "gpu": torch.cuda.get_device_name() if bf16 else "",
                              "trained_tokens_per_step": per,
                              "learner_tokens_per_s": per / learner_s, "plain_tokens_per_s": per / plain_s,
                              "learner_over_plain": plain_s / learner_s, "sync_s": sync_s,
                              "torch": torch.__version__}), flush=True)


if __name__ == "__main__":
    main()
