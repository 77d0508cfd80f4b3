"""The learner: a causal LM (and optional value head), its gradient and AdamW state.

The arithmetic follows agentrl's built-in learner (``learn.Builtin``, ``optim``,
``model/kernels/adamw.go``) so that both train the same weights from the same batch:

* logprob of token j of a sequence: ``log_softmax(logits at position j-1)[x_j]`` in float32,
  entropy ``-sum p log p`` of that distribution, value ``value_head.weight . h + bias`` on the
  final-norm hidden state at position j-1;
* forward_backward accumulates the gradient of ``sum_j c_j logprob_j + e_j entropy_j +
  v_j value_j`` over masked tokens;
* optim_step: the global gradient norm (summed in float64), clipping by ``clip / (norm + 1e-6)``
  when the norm exceeds the bound, then AdamW with decoupled decay on 2-D tensors only:
  ``m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
  p = p (1 - lr wd) - (lr / bc1) m / (sqrt(v / bc2) + eps)``, with bc1, bc2 rounded to
  float32 as the Go kernel rounds them.
"""

import collections
import contextlib
import json
import math
import os
import shutil
import struct
import tempfile
import time

import torch

from . import dist, modeling
from .wire import BadRequest

VALUE_WEIGHT, VALUE_BIAS = "value_head.weight", "value_head.bias"


def f32(x):
    """x rounded to float32, as a Python float."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


class NonFinite(Exception):
    def __init__(self, norm):
        super().__init__(f"gradient norm {norm}; the gradient was cleared")
        self.norm = norm


class BrokenWeights(Exception):
    pass


def load_causal_lm(path):
    """The model in folder path: this package's own implementation of the families, or
    transformers' AutoModelForCausalLM for an architecture it does not implement."""
    try:
        return modeling.load_model(path)
    except ValueError as own:
        try:
            import transformers  # noqa: F401  (optional, for breadth)
        except ImportError:
            raise own
        return HFModel(path)


class HFModel(torch.nn.Module):
    """transformers' AutoModelForCausalLM behind this package's interface (hidden_states,
    logits, state_dict with the checkpoint's names)."""

    def __init__(self, path):
        super().__init__()
        import transformers

        self.hf = transformers.AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32)
        with open(os.path.join(path, "config.json")) as f:
            self.config = json.load(f)

    def hidden_states(self, input_ids):
        out = self.hf.model(input_ids=input_ids)
        return out.last_hidden_state

    def logits(self, h):
        return self.hf.lm_head(h)

    def tensors(self):
        return {k[len("hf."):]: v for k, v in self.state_dict().items()}


class LoRALinear(torch.nn.Module):
    """A frozen nn.Linear plus PEFT's LoRA: y = base(x) + (alpha/r)·(x·Aᵀ)·Bᵀ."""

    def __init__(self, base, a, b, scale):
        super().__init__()
        self.base = base
        for p in self.base.parameters():
            p.requires_grad_(False)
        self.lora_A = torch.nn.Parameter(a)
        self.lora_B = torch.nn.Parameter(b)
        self.scale = scale

    def forward(self, x):
        return self.base(x) + self.scale * ((x @ self.lora_A.t().to(x.dtype)) @ self.lora_B.t().to(x.dtype))


PEFT_PREFIX = "base_model.model."


def attach_adapter(model, adapter_dir):
    """Wraps the target projections of model with the PEFT LoRA adapter in adapter_dir; returns
    (adapter_config dict, {PEFT tensor name: parameter})."""
    with open(os.path.join(adapter_dir, "adapter_config.json")) as f:
        cfg = json.load(f)
    if cfg.get("peft_type") != "LORA":
        raise ValueError(f"adapter peft_type {cfg.get('peft_type')!r} is not LORA")
    for key, ok in (("use_dora", False), ("use_rslora", False), ("fan_in_fan_out", False)):
        if bool(cfg.get(key, False)) != ok:
            raise ValueError(f"adapter {key} is not supported")
    if cfg.get("bias", "none") != "none" or cfg.get("modules_to_save") or cfg.get("layers_to_transform") \
            or cfg.get("rank_pattern") or cfg.get("alpha_pattern"):
        raise ValueError("adapter bias, modules_to_save, layers_to_transform and rank/alpha patterns are not supported")
    if float(cfg.get("lora_dropout", 0) or 0) != 0:
        raise ValueError("adapter lora_dropout must be 0 for training here")
    r, alpha = int(cfg["r"]), float(cfg["lora_alpha"])
    scale = f32(alpha / r)
    sd = modeling.read_safetensors(os.path.join(adapter_dir, "adapter_model.safetensors"))
    for p in model.parameters():
        p.requires_grad_(False)
    pairs = {}
    for name, t in sd.items():
        if not name.startswith(PEFT_PREFIX) or not (name.endswith(".lora_A.weight") or name.endswith(".lora_B.weight")):
            raise ValueError(f"adapter tensor {name!r} is not a PEFT LoRA weight")
        path, ab = name[len(PEFT_PREFIX):].rsplit(".lora_", 1)
        pairs.setdefault(path, {})[ab[0]] = (name, t)
    named = {}
    for path, ab in sorted(pairs.items()):
        if set(ab) != {"A", "B"}:
            raise ValueError(f"adapter of {path} lacks lora_A or lora_B")
        parent_path, leaf = path.rsplit(".", 1)
        parent = model.get_submodule(parent_path)
        base = getattr(parent, leaf)
        if not isinstance(base, torch.nn.Linear):
            raise ValueError(f"adapter target {path} is not a linear layer")
        (na, a), (nb, b) = ab["A"], ab["B"]
        if tuple(a.shape) != (r, base.in_features) or tuple(b.shape) != (base.out_features, r):
            raise ValueError(f"adapter of {path}: shapes {list(a.shape)}, {list(b.shape)} do not fit rank {r}")
        wrapped = LoRALinear(base, a.clone(), b.clone(), scale)
        setattr(parent, leaf, wrapped)
        named[na], named[nb] = wrapped.lora_A, wrapped.lora_B
    if not named:
        raise ValueError("the adapter has no tensors")
    return cfg, named


# Tensors are updated in groups of at most this many elements (unless one tensor alone is
# larger): each group's multi-tensor kernels hold two temporaries the size of the group.
FOREACH_GROUP = 1 << 26


def _groups(sizes, limit=None):
    """Consecutive index ranges of sizes, each summing to at most limit (FOREACH_GROUP) or
    holding one item."""
    limit = FOREACH_GROUP if limit is None else limit
    out, start, total = [], 0, 0
    for i, n in enumerate(sizes):
        if i > start and total + n > limit:
            out.append(range(start, i))
            start, total = i, 0
        total += n
    if start < len(sizes):
        out.append(range(start, len(sizes)))
    return out


def adamw_update(params, grads, ms, vs, decayed, lr, wd, beta1, beta2, eps, step, inv_bc2):
    """AdamW on lists of float32 tensors, in place, with multi-tensor kernels: per element, the
    float32 operations of ``model/kernels/adamw.go`` in its order, each rounded once:
    ``m = m*b1 + g*(1-b1); v = v*b2 + (g*(1-b2))*g; p = p*decay - (m*step) / (sqrt(v*inv_bc2) + eps)``
    with decay ``1 - lr*wd`` where decayed[i] (2-D tensors) and none elsewhere. No fused
    multiply-add (alpha=, addcmul, addcdiv) is used, so every product is rounded as the Go
    kernel rounds it. grads are consumed (overwritten)."""
    omb1, omb2 = f32(1 - beta1), f32(1 - beta2)
    decay = f32(1 - f32(lr * wd))
    for r in _groups([p.numel() for p in params]):
        P, G, M, V = [params[i] for i in r], [grads[i] for i in r], [ms[i] for i in r], [vs[i] for i in r]
        t = torch._foreach_mul(G, omb2)
        torch._foreach_mul_(t, G)
        torch._foreach_mul_(V, beta2)
        torch._foreach_add_(V, t)
        del t
        torch._foreach_mul_(G, omb1)
        torch._foreach_mul_(M, beta1)
        torch._foreach_add_(M, G)
        upd = torch._foreach_mul(M, step)
        den = torch._foreach_mul(V, inv_bc2)
        torch._foreach_sqrt_(den)
        torch._foreach_add_(den, eps)
        torch._foreach_div_(upd, den)
        del den
        if decay != 1.0:
            D = [p for p, d in zip(P, (decayed[i] for i in r)) if d]
            if D:
                torch._foreach_mul_(D, decay)
        upd = [u if u.dtype == p.dtype else u.to(p.dtype) for u, p in zip(upd, P)]
        torch._foreach_sub_(P, upd)


class Phases:
    """Time spent in named phases of the learner's work, for the bench's per-phase breakdown
    (``Learner.phases``; None, the default, times nothing). On CUDA each phase is timed on the
    device by two events recorded on the current stream, so that timing waits for nothing inside
    a step; ``collect()`` synchronizes once and reads them. Beside it the host's time in the
    phase (its Python, launches and any wait for the device) is kept: a phase whose host time
    exceeds its device time waited or launched more than the device worked. On a CPU both are
    the wall-clock time of the phase."""

    def __init__(self, device):
        self.cuda = torch.device(device).type == "cuda"
        self.device_s = collections.defaultdict(float)
        self.host_s = collections.defaultdict(float)
        self._events = []

    @contextlib.contextmanager
    def __call__(self, name):
        start = end = None
        if self.cuda:
            start = torch.cuda.Event(enable_timing=True)
            start.record()
        t = time.perf_counter()
        try:
            yield
        finally:
            host = time.perf_counter() - t
            self.host_s[name] += host
            if self.cuda:
                end = torch.cuda.Event(enable_timing=True)
                end.record()
                self._events.append((name, start, end))
            else:
                self.device_s[name] += host

    def collect(self):
        """Waits for the device and adds the timed events to device_s."""
        if self.cuda:
            torch.cuda.synchronize()
            for name, start, end in self._events:
                self.device_s[name] += start.elapsed_time(end) / 1e3
        self._events = []

    def reset(self):
        self.collect()
        self.device_s.clear()
        self.host_s.clear()


_NO_PHASE = contextlib.nullcontext()


def non_finite(tensors):
    """The index of the first of tensors holding a NaN or an infinity, or None; one wait for
    the device. The sum of each tensor's absolute values (multi-tensor kernels, a few launches
    for all of them) is finite when every element is, so only when one sum is not (an element
    is not finite, or finite values overflow the sum) is each of those tensors checked by
    element."""
    if not tensors:
        return None
    sums = torch._foreach_norm(tensors, 1) if hasattr(torch, "_foreach_norm") else [t.abs().sum() for t in tensors]
    ok = torch.isfinite(torch.stack([s.float() for s in sums])).tolist()
    for i, good in enumerate(ok):
        if not good and not bool(torch.isfinite(tensors[i]).all()):
            return i
    return None


def microbatch_groups(lens, max_tokens):
    """Sequences of lengths lens grouped, longest first (ties by index), into micro-batches of
    at most max_tokens padded positions (a sequence of n tokens fills n - 1); none is split."""
    order = sorted(range(len(lens)), key=lambda i: (-lens[i], i))
    groups, cur, width = [], [], 0
    for i in order:
        w = max(width, lens[i] - 1, 1)
        if cur and w * (len(cur) + 1) > max_tokens:
            groups.append(cur)
            cur, w = [], max(lens[i] - 1, 1)
        cur.append(i)
        width = w
    if cur:
        groups.append(cur)
    return groups


class Learner:
    def __init__(self, model_dir, device="cpu", bf16=False, max_tokens=16384, reference_dir=None,
                 beta1=0.9, beta2=0.99, eps=1e-8, weight_decay=0.0, value_head=False, adapter_dir=None,
                 activation_checkpointing=False, fsdp=None, rank=0):
        self.device = torch.device(device)
        self.activation_checkpointing = bool(activation_checkpointing)
        self.bf16 = bool(bf16)
        if self.bf16 and self.device.type != "cuda":
            raise ValueError("bf16 autocast is for CUDA devices")
        self.max_tokens = int(max_tokens)
        if self.max_tokens < 2:
            raise ValueError("max_tokens must be at least 2")
        self.beta1, self.beta2, self.eps, self.wd = f32(beta1), f32(beta2), f32(eps), f32(weight_decay)
        for name, v, lo, hi in (("beta1", self.beta1, 0, 1), ("beta2", self.beta2, 0, 1)):
            if not lo <= v < hi:
                raise ValueError(f"{name} must be in [0, 1), got {v}")
        if not self.eps > 0 or not self.wd >= 0 or math.isinf(self.wd):
            raise ValueError("eps must be positive and weight_decay finite and non-negative")
        self.model = load_causal_lm(model_dir)
        self.adapter_cfg, self.adapter = None, None
        if adapter_dir:
            if value_head:
                raise ValueError("a value head beside LoRA adapters is not supported")
            self.adapter_cfg, self.adapter = attach_adapter(self.model, adapter_dir)
        self.model = self.model.to(self.device)
        self.rank = rank  # under --fsdp, rank 0 alone writes folders (dist.py)
        self.sharded = fsdp is not None
        if fsdp is not None and self.activation_checkpointing:
            raise ValueError("--activation-checkpointing with --fsdp is not supported yet")
        if fsdp is not None:
            dist.shard(self.model, fsdp)
        if self.adapter is not None:  # the parameters moved with the model (and were sharded)
            self.adapter = {n: p for n, p in self._adapter_params()}
        with open(os.path.join(model_dir, "config.json")) as f:
            self.config = json.load(f)
        self.vocab = int(self.config["vocab_size"])
        self.dim = int(self.config["hidden_size"])
        self.value = None
        vh = os.path.join(model_dir, "value_head.safetensors")
        if os.path.exists(vh) and self.adapter is None:
            self._load_value_head(modeling.read_safetensors(vh))
        elif value_head:
            self.value = {VALUE_WEIGHT: torch.zeros(1, self.dim, device=self.device, requires_grad=True),
                          VALUE_BIAS: torch.zeros(1, device=self.device, requires_grad=True)}
        self.reference = None
        if reference_dir:
            self.reference = load_causal_lm(reference_dir).to(self.device)
            for p in self.reference.parameters():
                p.requires_grad_(False)
            if fsdp is not None:
                dist.shard(self.reference, fsdp)
        self.steps = 0
        self.pending = 0
        self.phases = None  # a Phases to time the work by phase (bench's breakdown)
        self._init_optimizer()

    def _phase(self, name):
        return _NO_PHASE if self.phases is None else self.phases(name)

    # ----- parameters --------------------------------------------------------------------

    def _adapter_params(self):
        for path, mod in self.model.named_modules():
            if isinstance(mod, LoRALinear):
                yield PEFT_PREFIX + path + ".lora_A.weight", mod.lora_A
                yield PEFT_PREFIX + path + ".lora_B.weight", mod.lora_B

    def named_tensors(self):
        """name -> trained parameter, the checkpoint's names (value head last); with a LoRA
        adapter, its tensors alone under PEFT's names (the base is frozen)."""
        if self.adapter is not None:
            return dict(self.adapter)
        if isinstance(self.model, HFModel):
            named = dict(self.model.hf.named_parameters())
        else:
            named = dict(self.model.named_parameters())
        if self.value is not None:
            named.update(self.value)
        return named

    def _load_value_head(self, sd):
        w, b = sd.get(VALUE_WEIGHT), sd.get(VALUE_BIAS)
        if w is None or b is None or tuple(w.shape) != (1, self.dim) or tuple(b.shape) != (1,) or len(sd) != 2:
            raise ValueError(f"value_head.safetensors must hold {VALUE_WEIGHT} [1, {self.dim}] and {VALUE_BIAS} [1]")
        self.value = {VALUE_WEIGHT: w.to(self.device).requires_grad_(True),
                      VALUE_BIAS: b.to(self.device).requires_grad_(True)}

    def _init_optimizer(self):
        # Under --fsdp each rank holds the moments of its shard (dist.local).
        self.m = {n: torch.zeros_like(dist.local(p), dtype=torch.float32) for n, p in self.named_tensors().items()}
        self.v = {n: torch.zeros_like(dist.local(p), dtype=torch.float32) for n, p in self.named_tensors().items()}

    def num_params(self):
        return sum(p.numel() for p in self.named_tensors().values())

    def zero_grad(self):
        for p in self.named_tensors().values():
            p.grad = None
        self.pending = 0

    # ----- forward -----------------------------------------------------------------------

    def _microbatches(self, req):
        """Sequences grouped, longest first, into micro-batches of at most max_tokens padded
        positions; a sequence is never split."""
        lens = [req.offsets[i + 1] - req.offsets[i] for i in range(req.seqs())]
        order = sorted(range(len(lens)), key=lambda i: (-lens[i], i))
        for i in order:
            if lens[i] - 1 > self.max_tokens:
                raise BadRequest(f"sequence {i} has {lens[i]} tokens, more than the learner's max_tokens {self.max_tokens} holds")
        return microbatch_groups(lens, self.max_tokens)

    def _to_device(self, t):
        """t on the learner's device; a CUDA copy is made from pinned memory without waiting
        for it (the caching host allocator keeps the pinned block until the copy is done)."""
        if self.device.type == "cuda":
            return t.pin_memory().to(self.device, non_blocking=True)
        return t.to(self.device)

    def _upload(self, req, coefs=()):
        """The request's tokens, mask and coefficients on the device, each with one more entry
        (0, False, 0) that padding positions index: one copy per array and request, not per
        micro-batch."""
        n = len(req.tokens)
        dev = {"tokens": self._to_device(torch.cat([req.tokens, torch.zeros(1, dtype=torch.int64)])),
               "mask": self._to_device(torch.cat([req.mask, torch.zeros(1, dtype=torch.bool)]))}
        for name in coefs:
            dev[name] = self._to_device(torch.cat([req.coef[name], torch.zeros(1)]))
        dev["n"] = n
        return dev

    def _positions(self, req, idx, dev):
        """[B, L] on the device: the index of the token each position of micro-batch idx
        predicts (lo+1+j of sequence i), or the padding entry n."""
        offs = req.offsets
        lo = torch.tensor([offs[i] for i in idx], dtype=torch.int64)
        cnt = torch.tensor([offs[i + 1] - offs[i] - 1 for i in idx], dtype=torch.int64)
        L = max(int(cnt.max()), 1)
        j = torch.arange(L, dtype=torch.int64)
        pos = torch.where(j[None, :] < cnt[:, None], lo[:, None] + 1 + j[None, :], torch.tensor(dev["n"]))
        return self._to_device(pos)

    def _run(self, model, dev, pos, values, entropies=True, phase="forward"):
        """Logprobs, entropies (and values) [B, L] of the sequences at positions pos (from
        _positions), predicting tokens 1..n-1, with a mask of the positions asked."""
        if values and self.value is None:
            raise BadRequest("values asked of a learner without a value head")
        n = dev["n"]
        with self._phase(phase + ".input"):
            inp = dev["tokens"][torch.where(pos < n, pos - 1, pos)]
            tgt = dev["tokens"][pos]
            want = dev["mask"][pos]
        ctx = torch.autocast(device_type="cuda", dtype=torch.bfloat16) if self.bf16 else contextlib.nullcontext()
        with self._phase(phase + ".model"), ctx:
            h = self._hidden(model, inp)
            logits = self._logits(model, h)
        with self._phase(phase + ".logprob"):
            logits = logits.float()
            logp_all = torch.log_softmax(logits, dim=-1)
            lp = logp_all.gather(-1, tgt.unsqueeze(-1)).squeeze(-1)
            ent = -(logp_all.exp() * logp_all).sum(-1) if entropies else None
            val = None
            if values:
                hf = h.float()
                val = hf @ self.value[VALUE_WEIGHT].t().squeeze(-1) + self.value[VALUE_BIAS]
        return lp, ent, val, want

    def _hidden(self, model, inp):
        """The final-norm hidden states; with activation checkpointing (and a gradient to take),
        each block's activations are recomputed in the backward pass instead of kept."""
        if not (self.activation_checkpointing and torch.is_grad_enabled()):
            return model.hidden_states(inp)
        if isinstance(model, HFModel):
            model.hf.gradient_checkpointing_enable()
            return model.hidden_states(inp)
        from torch.utils.checkpoint import checkpoint

        x = model.model.embed_tokens(inp)
        cos, sin = model.rope(inp.shape[1])
        for block in model.model.layers:
            x = checkpoint(block, x, cos, sin, use_reentrant=False)
        return model.model.norm(x)

    @staticmethod
    def _logits(model, h):
        if isinstance(model, HFModel) or hasattr(model, "logits"):  # logits: set by dist.shard
            return model.logits(h)
        if model.lm_head is None:
            return h @ model.model.embed_tokens.weight.t()
        return model.lm_head(h)

    @staticmethod
    def _scatter(pos, x, want, dst):
        """Per-position x [B, L] into per-token dst [n+1] on the device (0 where not wanted;
        padding positions all write 0 to the last entry)."""
        x = torch.where(want, x, torch.zeros((), dtype=x.dtype, device=x.device)).detach()
        dst.index_put_((pos.reshape(-1),), x.reshape(-1))

    def forward(self, req, entropies, values, reference):
        model = self.model
        if reference:
            if self.reference is None:
                raise BadRequest("reference logprobs asked of a learner started without --reference")
            model = self.reference
            if values:
                raise BadRequest("the reference policy has no value head")
        n = len(req.tokens)
        with torch.no_grad():
            with self._phase("forward.input"):
                outs = [torch.zeros(n + 1, device=self.device) for _ in range(1 + bool(entropies) + bool(values))]
                dev = self._upload(req)
                groups = self._microbatches(req)
            for idx in groups:
                with self._phase("forward.input"):
                    pos = self._positions(req, idx, dev)
                lp, ent, val, want = self._run(model, dev, pos, values, entropies)
                with self._phase("forward.answer"):
                    for x, dst in zip([x for x in (lp, ent, val) if x is not None], outs):
                        self._scatter(pos, x, want, dst)
            with self._phase("forward.answer"):
                got = list(torch.stack(outs)[:, :n].cpu())  # one copy back, one synchronization
        lp_out = got.pop(0)
        ent_out = got.pop(0) if entropies else None
        val_out = got.pop(0) if values else None
        return lp_out, ent_out, val_out

    @staticmethod
    def _trained_tokens(req):
        """The positions forward_backward trains: masked tokens other than each sequence's
        first, counted on the host."""
        starts = [req.offsets[i] for i in range(req.seqs()) if req.offsets[i + 1] > req.offsets[i]]
        return int(req.mask.sum()) - int(req.mask[starts].sum()) if starts else 0

    def forward_backward(self, req):
        if "values" in req.coef and self.value is None:
            raise BadRequest("value coefficients for a learner without a value head")
        with self._phase("forward_backward.input"):
            dev = self._upload(req, coefs=list(req.coef))
            groups = self._microbatches(req)
        for idx in groups:
            with self._phase("forward_backward.input"):
                pos = self._positions(req, idx, dev)
            lp, ent, val, want = self._run(self.model, dev, pos, "values" in req.coef, "entropies" in req.coef,
                                           phase="forward_backward")
            with self._phase("forward_backward.logprob"):
                w = want.float()
                total = (dev["logprobs"][pos] * w * lp).sum()
                if "entropies" in req.coef:
                    total = total + (dev["entropies"][pos] * w * ent).sum()
                if "values" in req.coef:
                    total = total + (dev["values"][pos] * w * val).sum()
            with self._phase("forward_backward.backward"):
                total.backward()
        tokens = self._trained_tokens(req)
        self.pending += tokens
        return tokens

    # ----- optimizer ---------------------------------------------------------------------

    def optim_step(self, lr, grad_clip):
        lr, clip = f32(lr), f32(grad_clip)
        if not lr >= 0 or math.isinf(lr):
            raise BadRequest(f"learning rate must be finite and non-negative, got {lr}")
        named = self.named_tensors()
        grads = {}
        with self._phase("optim_step.norm"):
            squares = []  # summed on the device: one synchronization per step, not one per tensor
            for n, p in named.items():
                g = p.grad
                if g is None:
                    g = torch.zeros_like(dist.local(p), dtype=torch.float32)
                g = dist.local(g).float()
                grads[n] = g
                squares.append((g.double() ** 2).sum())
            total = float(torch.stack(squares).sum()) if squares else 0.0
            if self.sharded:
                total = dist.all_sum(total, self.device)  # the shards' squares, summed over the ranks
        norm = f32(math.sqrt(total)) if math.isfinite(total) else float("nan")
        if not math.isfinite(norm):
            self.zero_grad()
            raise NonFinite(norm)
        with self._phase("optim_step.clip"):
            if clip > 0 and norm > clip and grads:
                torch._foreach_mul_(list(grads.values()), f32(clip / f32(norm + f32(1e-6))))
        self.steps += 1
        bc1 = f32(1 - self.beta1 ** self.steps)
        bc2 = f32(1 - self.beta2 ** self.steps)
        names = list(named)
        with self._phase("optim_step.adamw"), torch.no_grad():
            adamw_update([dist.local(named[n]) for n in names], [grads[n] for n in names],
                         [self.m[n] for n in names], [self.v[n] for n in names],
                         [named[n].dim() == 2 for n in names], lr=lr, wd=self.wd, beta1=self.beta1,
                         beta2=self.beta2, eps=self.eps, step=f32(lr / bc1), inv_bc2=f32(1 / bc2))
        with self._phase("optim_step.zero_grad"):
            self.zero_grad()
        with self._phase("optim_step.finite"):
            bad = non_finite([dist.local(p) for p in named.values()])
        if bad is not None:
            raise BrokenWeights(f"the update made tensor {list(named)[bad]!r} non-finite at learning rate {lr} (gradient norm {norm})")
        return norm, lr

    # ----- files -------------------------------------------------------------------------

    def _weights(self):
        sd = {n: dist.full(p.detach()).float().cpu() for n, p in self.named_tensors().items()}
        head = {n: sd.pop(n) for n in (VALUE_WEIGHT, VALUE_BIAS) if n in sd}
        return sd, head

    def _write_folder(self, dir, state):
        # Every tensor is gathered first: under --fsdp a collective every rank joins; rank 0
        # alone then writes.
        named = self.named_tensors()
        if self.adapter is not None:
            # The adapter, in PEFT's format; a state folder also holds the adapter's moments.
            adapter = {n: dist.full(p.detach()).float().cpu() for n, p in named.items()}
            sd, head = {}, {}
        else:
            sd, head = self._weights()
        opt = {}
        if state:
            for n, p in named.items():
                opt["exp_avg." + n] = dist.full(dist.like(self.m[n], p)).cpu()
                opt["exp_avg_sq." + n] = dist.full(dist.like(self.v[n], p)).cpu()
        if self.rank != 0:
            return 0
        dir = os.path.abspath(dir)
        parent = os.path.dirname(dir)
        os.makedirs(parent, exist_ok=True)
        tmp = tempfile.mkdtemp(prefix="." + os.path.basename(dir) + ".tmp-", dir=parent)
        try:
            if self.adapter is not None:
                with open(os.path.join(tmp, "adapter_config.json"), "w") as f:
                    json.dump(self.adapter_cfg, f, indent=2)
                modeling.write_safetensors(os.path.join(tmp, "adapter_model.safetensors"), adapter, torch.float32, {"format": "pt"})
            else:
                with open(os.path.join(tmp, "config.json"), "w") as f:
                    json.dump(self.config, f, indent=2)
                modeling.write_safetensors(os.path.join(tmp, "model.safetensors"), sd, torch.float32, {"format": "pt"})
            if head and state:
                modeling.write_safetensors(os.path.join(tmp, "value_head.safetensors"), head, torch.float32, {"format": "pt"})
            if state:
                modeling.write_safetensors(os.path.join(tmp, "optimizer.safetensors"), opt, torch.float32,
                                           {"format": "pt", "step": str(self.steps)})
                with open(os.path.join(tmp, "trainer_state.json"), "w") as f:
                    f.write('{"format_version": 1, "optimizer": true, "extra": null}\n')
            size = sum(os.path.getsize(os.path.join(tmp, x)) for x in os.listdir(tmp))
            if os.path.exists(dir):
                old = tempfile.mkdtemp(prefix="." + os.path.basename(dir) + ".old-", dir=parent)
                os.rename(dir, os.path.join(old, "d"))
                os.rename(tmp, dir)
                shutil.rmtree(old)
            else:
                os.rename(tmp, dir)
            return size
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise

    def save_for_sampler(self, dir):
        return self._write_folder(dir, state=False)

    def save_state(self, dir):
        return self._write_folder(dir, state=True)

    def load_state(self, dir):
        named = self.named_tensors()
        if self.adapter is not None:
            sd = modeling.read_safetensors(os.path.join(dir, "adapter_model.safetensors"))
        else:
            sd = modeling.read_safetensors(os.path.join(dir, "model.safetensors"))
        vh = os.path.join(dir, "value_head.safetensors")
        if os.path.exists(vh) and self.adapter is None:
            if self.value is None:
                raise BadRequest(f"{dir} has a value head, this learner has none")
            sd.update(modeling.read_safetensors(vh))
        missing = [n for n in named if n not in sd]
        extra = [n for n in sd if n not in named]
        if missing or extra:
            raise BadRequest(f"{dir}: tensors missing {missing[:5]}, unexpected {extra[:5]}")
        steps, m, v = 0, None, None
        ts = os.path.join(dir, "trainer_state.json")
        has_opt = False
        if os.path.exists(ts):
            with open(ts) as f:
                has_opt = bool(json.load(f).get("optimizer"))
        if has_opt:
            path = os.path.join(dir, "optimizer.safetensors")
            opt = modeling.read_safetensors(path)
            with open(path, "rb") as f:
                (hn,) = struct.unpack("<Q", f.read(8))
                meta = json.loads(f.read(hn)).get("__metadata__", {})
            steps = int(meta["step"])
            m = {n: opt["exp_avg." + n] for n in named}
            v = {n: opt["exp_avg_sq." + n] for n in named}
        with torch.no_grad():
            for n, p in named.items():
                if tuple(sd[n].shape) != tuple(p.shape):
                    raise BadRequest(f"{dir}: tensor {n} has shape {list(sd[n].shape)}, the model {list(p.shape)}")
                dist.local(p).copy_(dist.shard_of(sd[n], p))  # under --fsdp, this rank's shard
        self._init_optimizer()
        if has_opt:
            for n, p in named.items():
                self.m[n].copy_(dist.shard_of(m[n], p))
                self.v[n].copy_(dist.shard_of(v[n], p))
        self.steps = steps
        self.zero_grad()
        return steps
