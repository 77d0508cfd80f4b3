"""FSDP2 across the GPUs of one or more hosts under torchrun (``--fsdp``).

Every rank loads the model, wraps each transformer block and then the whole model in torch's
``fully_shard`` (FSDP2: parameters, gradients and the learner's AdamW moments are sharded over
the ranks), and runs every request: rank 0 alone listens for HTTP and broadcasts each request's
route and body to the other ranks before it handles it, so all ranks enter the same collectives
in the same order. Each rank computes the whole batch (the ranks shard memory, not data: the
gradient every rank computes is the same, and FSDP2's reduce-scatter, an average, leaves it
so). Saves gather the full tensors on every rank and rank 0 writes them.

torch >= 2.4 has ``fully_shard`` (``torch.distributed.fsdp`` from 2.6, ``torch.distributed.
_composable.fsdp`` in 2.4 and 2.5); an older torch, such as Debian's 1.13, is refused by name.
"""

import datetime
import os
import types

import torch

STOP = "/stop"  # the route rank 0 broadcasts when it shuts down


def _fsdp2_module():
    try:
        import torch.distributed.fsdp as m  # torch >= 2.6

        if hasattr(m, "fully_shard"):
            return m
    except Exception:  # ImportError; an old torch's modules may fail to import otherwise too
        pass
    try:
        import torch.distributed._composable.fsdp as m  # torch 2.4, 2.5

        return m
    except Exception:
        return None


def fully_shard_fn():
    """torch's FSDP2 ``fully_shard``, or None when this torch has none."""
    m = _fsdp2_module() if torch.distributed.is_available() else None
    return getattr(m, "fully_shard", None)


class FSDP2:
    """fully_shard and register_fsdp_forward_method of this torch."""

    def __init__(self, fully_shard, register):
        self.fully_shard, self.register = fully_shard, register


def require_fsdp2():
    """This torch's FSDP2, or a ValueError naming the torch needed."""
    m = _fsdp2_module() if torch.distributed.is_available() else None
    if m is None or not hasattr(m, "fully_shard"):
        raise ValueError(f"--fsdp needs torch >= 2.4 with torch.distributed (FSDP2's fully_shard, "
                         f"torch.distributed.fsdp.fully_shard); this is torch {torch.__version__}")
    if not hasattr(m, "register_fsdp_forward_method"):
        raise ValueError(f"--fsdp needs FSDP2's register_fsdp_forward_method (torch >= 2.5); this is torch {torch.__version__}")
    return FSDP2(m.fully_shard, m.register_fsdp_forward_method)


def init(device, timeout_s):
    """Joins torchrun's process group; returns (rank, world size, this rank's device)."""
    missing = [k for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT") if k not in os.environ]
    if missing:
        raise ValueError(f"--fsdp runs under torchrun (torchrun --nproc-per-node N -m agentrl_learner ...): {', '.join(missing)} unset")
    rank, world, local = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ["LOCAL_RANK"])
    if device.startswith("cuda"):
        torch.cuda.set_device(local)
        dev, backend = f"cuda:{local}", "nccl"
    else:
        dev, backend = "cpu", "gloo"
    # Every collective has this deadline: a rank that dies or hangs fails the others, never a hang.
    torch.distributed.init_process_group(backend=backend, timeout=datetime.timedelta(seconds=timeout_s))
    return rank, world, dev


def blocks(model):
    """The transformer blocks of the learner's model (its own families or transformers')."""
    inner = getattr(model, "hf", model)
    for path in ("model.layers", "transformer.h", "gpt_neox.layers"):
        obj = inner
        for part in path.split("."):
            obj = getattr(obj, part, None)
            if obj is None:
                break
        if obj is not None:
            return list(obj)
    raise ValueError("--fsdp: the model's transformer blocks were not found (model.layers)")


def _logits(model, h):
    if model.lm_head is None:  # tied embeddings
        return h @ model.model.embed_tokens.weight.t()
    return model.lm_head(h)


def shard(model, fsdp):
    """FSDP2: each block, then the model (the embeddings, final norm and head, gathered for the
    learner's two calls of the model, hidden_states and logits, which are registered as forward
    methods: the learner never calls the model's forward)."""
    for b in blocks(model):
        fsdp.fully_shard(b)
    fsdp.fully_shard(model)
    if not hasattr(model, "logits"):
        model.logits = types.MethodType(_logits, model)
    for name in ("hidden_states", "logits"):
        fsdp.register(model, name)
    return model


def local(t):
    """The rank's shard of a DTensor (sharing its storage), or t itself."""
    return t.to_local() if hasattr(t, "to_local") else t


def full(t):
    """The whole of a DTensor, gathered (a collective: every rank calls it), or t itself."""
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def like(shard_, p):
    """A DTensor laid out as parameter p over the rank-local tensor shard_ (t itself when p is
    not a DTensor)."""
    if not hasattr(p, "device_mesh"):
        return shard_
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # torch 2.4
        from torch.distributed._tensor import DTensor
    return DTensor.from_local(shard_, p.device_mesh, p.placements, shape=p.shape, stride=p.stride())


def shard_of(whole, p):
    """The rank's shard of the full tensor whole, laid out as parameter p."""
    if not hasattr(p, "device_mesh"):
        return whole
    try:
        from torch.distributed.tensor import distribute_tensor
    except ImportError:  # torch 2.4
        from torch.distributed._tensor import distribute_tensor
    return distribute_tensor(whole.to(local(p).device), p.device_mesh, p.placements).to_local()


def all_sum(x, device):
    """x (a float) summed over the ranks; x itself without a process group."""
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return x
    t = torch.tensor([x], dtype=torch.float64, device=device)
    torch.distributed.all_reduce(t)
    return float(t.item())


def broadcast_request(route, body):
    """Rank 0: sends a request to the other ranks before handling it."""
    torch.distributed.broadcast_object_list([route, body], src=0)


def follow(handle):
    """Ranks other than 0: handle(route, body) each request rank 0 broadcasts, until it stops."""
    while True:
        msg = [None, None]
        torch.distributed.broadcast_object_list(msg, src=0)
        route, body = msg
        if route == STOP:
            return
        handle(route, body)
