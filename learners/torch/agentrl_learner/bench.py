"""python -m agentrl_learner.bench: the learner's throughput against a plain PyTorch loop.

For each model size it writes a random Qwen2.5-shaped checkpoint, starts the learner
(``python -m agentrl_learner``) on it, and times through the protocol, on the same random batches:
forward (the proximal logprobs) + forward_backward + optim_step per step, and save_for_sampler (a
weight sync's write). Then it times a plain PyTorch loop on the same model and batches: bf16
autocast forward, the same logprob surrogate, backward with gradient accumulation over the
learner's micro-batches (the same memory bound), torch.optim.AdamW. It prints one JSON
line per size with tokens/s of both and their ratio. Written for a CUDA machine
(scripts/gpu-check); ``--device cpu --sizes tiny`` runs it anywhere.

The request bodies are encoded before the clock starts (a client's work, not the learner's); the
learner's decoding of them is timed. With ``--breakdown`` the learner also runs in this process
on the same batches, its work timed by phase (``learner.Phases``: CUDA events on a GPU,
wall-clock on a CPU), beside the plain loop's same phases, and a table per size says where each
one's step goes: input to the device, the model's forward, the log probabilities and loss, the
backward pass, the gradient norm, the optimizer, the answer's copy back, the wire decode, and
what the protocol adds (the step through HTTP less the step in process).
"""

import argparse
import contextlib
import gc
import http.client
import json
import os
import socket
import random
import subprocess
import sys
import tempfile
import time

import torch

from . import dist, modeling, wire
from .learner import Learner, Phases, microbatch_groups

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

    def step(self, bodies, lr=1e-5):
        f, fb = bodies
        self.post("/v1/forward", f, "application/octet-stream")
        self.post("/v1/forward_backward", fb, "application/octet-stream")
        ans = json.loads(self.post("/v1/optim_step", json.dumps({"steps": self.steps, "lr": lr, "grad_clip": 1.0}).encode(), "application/json"))
        self.steps = ans["steps"]

    def sync(self, dir, version):
        t = time.time()
        self.post("/v1/save_for_sampler", json.dumps({"version": version, "dir": dir}).encode(), "application/json")
        return time.time() - t


def encode(b):
    """The forward and forward_backward request bodies of batch b."""
    offs, toks, mask, coef = b
    return (wire.encode_request(wire.KIND_FORWARD, 0, offs, toks, mask),
            wire.encode_request(wire.KIND_FORWARD_BACKWARD, wire.A_LOGPROBS, offs, toks, mask, [coef]))


def synchronize(device):
    if device.startswith("cuda"):
        torch.cuda.synchronize()


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


def plain_loop(model_dir, bs, device, bf16, max_tokens, lr=1e-5, phases=None):
    """The same work as a plain PyTorch loop with gradient accumulation over the same
    micro-batches (the same memory bound): a no-grad forward of every micro-batch (the proximal
    logprobs), then forward + backward of each, clipping and torch.optim.AdamW. Returns seconds
    per step after one warm-up step. phases (a learner.Phases) times it by phase, under the
    learner's names for the same work, from the second step on."""
    m = modeling.load_model(model_dir).to(device)
    opt = torch.optim.AdamW(m.parameters(), lr=lr, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.0)
    off = contextlib.nullcontext()
    times = []
    for k, (offs, toks, mask, coef) in enumerate(bs):
        ph = phases if phases is not None and k > 0 else (lambda name: off)
        synchronize(device)
        t = time.perf_counter()
        with ph("forward.input"):
            groups = [padded(offs, toks, coef, idx, device) for idx in microbatches(offs, max_tokens)]
        with torch.no_grad():
            for inp, tgt, c in groups:
                with ph("forward.model"), autocast(bf16):
                    logits = m(inp)
                with ph("forward.logprob"):
                    torch.log_softmax(logits.float(), -1).gather(-1, tgt.unsqueeze(-1))
        for inp, tgt, c in groups:
            with ph("forward_backward.model"), autocast(bf16):
                logits = m(inp)
            with ph("forward_backward.logprob"):
                lp = torch.log_softmax(logits.float(), -1).gather(-1, tgt.unsqueeze(-1)).squeeze(-1)
                loss = (c * lp).sum()
            with ph("forward_backward.backward"):
                loss.backward()
        del logits, lp, loss
        with ph("optim_step.norm"):  # the norm and the clipping, one call
            torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        with ph("optim_step.adamw"):
            opt.step()
        with ph("optim_step.zero_grad"):
            opt.zero_grad(set_to_none=True)
        synchronize(device)
        if k > 0:
            times.append(time.perf_counter() - t)
    del m, opt
    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    return sum(times) / len(times)


def learner_in_process(model_dir, bodies, vocab, device, bf16, max_tokens, fsdp, lr=1e-5):
    """The learner's step in this process, without HTTP, as the server runs it (wire decode,
    forward, answer encode, wire decode, forward_backward, optim_step) on the same request
    bodies, timed by phase from the second step on. Returns (seconds per step, Phases). With
    fsdp (one rank: FSDP2 needs a process group, made here of this process alone)."""
    fs = None
    if fsdp:
        with socket.socket() as sk:
            sk.bind(("127.0.0.1", 0))
            port = sk.getsockname()[1]
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        fs = dist.require_fsdp2()
        _, _, device = dist.init(device, 300)
    try:
        L = Learner(model_dir, device=device, bf16=bf16, max_tokens=max_tokens, beta2=0.99, fsdp=fs)
        ph = Phases(device)
        times = []
        for k, (f, fb) in enumerate(bodies):
            if k == 1:
                L.phases = ph
            p = ph if k > 0 else (lambda name: contextlib.nullcontext())
            synchronize(device)
            t = time.perf_counter()
            with p("decode"):
                r = wire.decode_request(f, vocab)
            lp, ent, val = L.forward(r, False, False, False)
            with p("forward.answer"):
                wire.encode_answer(len(r.tokens), lp, ent, val)
            with p("decode"):
                r = wire.decode_request(fb, vocab)
            L.forward_backward(r)
            L.optim_step(lr, 1.0)
            synchronize(device)
            if k > 0:
                times.append(time.perf_counter() - t)
        ph.collect()
        del L
    finally:
        if fsdp and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    return sum(times) / len(times), ph


# The rows of the breakdown: (label, phase names summed).
ROWS = [
    ("wire decode of the request bodies", ["decode"]),
    ("forward (no grad): input to the device", ["forward.input"]),
    ("forward (no grad): model", ["forward.model"]),
    ("forward (no grad): log probabilities", ["forward.logprob"]),
    ("forward (no grad): answer back to the host", ["forward.answer"]),
    ("forward_backward: input to the device", ["forward_backward.input"]),
    ("forward_backward: model", ["forward_backward.model"]),
    ("forward_backward: log probabilities, loss", ["forward_backward.logprob"]),
    ("forward_backward: backward", ["forward_backward.backward"]),
    ("optim_step: gradient norm (and wait)", ["optim_step.norm"]),
    ("optim_step: clipping", ["optim_step.clip"]),
    ("optim_step: AdamW", ["optim_step.adamw"]),
    ("optim_step: zero_grad", ["optim_step.zero_grad"]),
    ("optim_step: finite check (and wait)", ["optim_step.finite"]),
]


def breakdown(size, device, steps, learner_ph, plain_ph, learner_s, plain_s, http_s):
    """The table (a list of lines) and its figures (a dict, milliseconds per step) comparing
    the learner's phases with the plain loop's."""
    unit = 1e3 / steps
    known = {n for _, names in ROWS for n in names}
    extra = sorted((set(learner_ph.host_s) | set(plain_ph.host_s)) - known)
    rows = ROWS + [(n, [n]) for n in extra]
    clock = "by CUDA events" if device.startswith("cuda") else "by the wall clock: a CPU has no device clock"
    lines = [f"-- {size} on {device}: ms per step by phase, device time ({clock}) / host time",
             f"   {'phase':<46}{'learner':>18}{'plain loop':>18}{'learner - plain':>17}"]
    fig = {}
    tot = {"learner": 0.0, "plain": 0.0}

    def cell(ph, names):
        if not any(n in ph.host_s for n in names):
            return None
        return sum(ph.device_s.get(n, 0.0) for n in names) * unit, sum(ph.host_s.get(n, 0.0) for n in names) * unit

    def fmt(c):
        return f"{c[0]:9.1f} /{c[1]:7.1f}" if c is not None else f"{'-':>18}"

    for label, names in rows:
        a, b = cell(learner_ph, names), cell(plain_ph, names)
        if a is None and b is None:
            continue
        diff = (a[0] if a else 0.0) - (b[0] if b else 0.0)
        tot["learner"] += a[0] if a else 0.0
        tot["plain"] += b[0] if b else 0.0
        fig[label] = {"learner": [round(x, 2) for x in a] if a else None, "plain": [round(x, 2) for x in b] if b else None}
        lines.append(f"   {label:<46}{fmt(a)}{fmt(b)}{diff:17.1f}")
    ls, ps = learner_s * 1e3, plain_s * 1e3
    lines.append(f"   {'sum of the phases (device)':<46}{tot['learner']:9.1f}{'':9}{tot['plain']:9.1f}{'':9}{tot['learner'] - tot['plain']:17.1f}")
    lines.append(f"   {'step, wall, in process':<46}{ls:9.1f}{'':9}{ps:9.1f}{'':9}{ls - ps:17.1f}")
    lines.append(f"   {'  of it in no phase (idle device, Python)':<46}{ls - tot['learner']:9.1f}{'':9}{ps - tot['plain']:9.1f}")
    if http_s is not None:
        hs = http_s * 1e3
        lines.append(f"   {'step, wall, through HTTP':<46}{hs:9.1f}{'':27}{hs - ps:17.1f}")
        lines.append(f"   {'  the protocol (HTTP less in process)':<46}{hs - ls:9.1f}")
    fig.update({"sum_learner": round(tot["learner"], 2), "sum_plain": round(tot["plain"], 2),
                "step_learner_in_process": round(ls, 2), "step_plain": round(ps, 2)})
    if http_s is not None:
        fig["step_learner_http"] = round(http_s * 1e3, 2)
    return lines, fig


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
    ap.add_argument("--breakdown", action="store_true",
                    help="also run the learner in this process, timed by phase beside the plain loop, and print the table")
    a = ap.parse_args(argv)
    if a.steps < 2:
        ap.error("--steps must be at least 2 (the first is a warm-up)")
    bf16 = a.device.startswith("cuda")
    for size in a.sizes.split(","):
        with tempfile.TemporaryDirectory(prefix="agentrl-bench-") as tmp:
            mdir = os.path.join(tmp, "model")
            torch.manual_seed(0)
            cfg = config(size)
            modeling.save_model(modeling.from_config(cfg), mdir, dtype=torch.bfloat16)
            bs = batches(cfg["vocab_size"], a.steps, a.seqs, a.min_len, a.max_len)
            bodies = [encode(b) for b in bs]
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
                c.step(bodies[0])  # warm-up
                t = time.perf_counter()
                for b in bodies[1:]:
                    c.step(b)
                learner_s = (time.perf_counter() - t) / (len(bs) - 1)
                sync_s = c.sync(os.path.join(tmp, "sampler", "v1"), 1)
            finally:
                proc.terminate()
                proc.wait(timeout=60)
                log.close()
            plain_ph = Phases(a.device) if a.breakdown else None
            plain_s = plain_loop(mdir, bs, a.device, bf16, a.max_tokens, phases=plain_ph)
            if plain_ph is not None:
                plain_ph.collect()
            per = tokens / (len(bs) - 1)
            # The figures first: the breakdown's run may fail or run out of time without them.
            print(json.dumps({"size": size, "device": a.device, "fsdp_ranks": a.fsdp,
                              "gpu": torch.cuda.get_device_name() if bf16 else "",
                              "trained_tokens_per_step": per,
                              "learner_tokens_per_s": per / learner_s, "plain_tokens_per_s": per / plain_s,
                              "learner_over_plain": plain_s / learner_s, "sync_s": sync_s,
                              "torch": torch.__version__}), flush=True)
            if not a.breakdown:
                continue
            if a.fsdp > 1:
                print(f"-- {size}: no breakdown of the learner under --fsdp {a.fsdp} (it runs in this process on one rank only)", flush=True)
                continue
            failed = None
            try:
                inproc_s, learner_ph = learner_in_process(mdir, bodies, cfg["vocab_size"], a.device, bf16, a.max_tokens,
                                                          fsdp=a.fsdp == 1)
            except Exception as e:  # the figures above still stand; say why the table is missing
                failed = f"{type(e).__name__}: {e}"
            if failed is not None:
                print(f"-- {size}: the learner's breakdown failed: {failed}", flush=True)
                gc.collect()  # the failed run's tensors (held by the exception until here), before the next size's
                if bf16:
                    torch.cuda.empty_cache()
                continue
            lines, fig = breakdown(size, a.device, len(bs) - 1, learner_ph, plain_ph, inproc_s, plain_s, learner_s)
            print(json.dumps({"size": size, "fsdp_ranks": a.fsdp, "learner_in_process_tokens_per_s": per / inproc_s,
                              "in_process_over_plain": plain_s / inproc_s, "breakdown_ms": fig}), flush=True)
            print("\n".join(lines), flush=True)


if __name__ == "__main__":
    main()
