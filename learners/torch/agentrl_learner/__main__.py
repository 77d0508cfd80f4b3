"""python -m agentrl_learner --listen HOST:PORT --model DIR: serve the learner protocol."""

import argparse
import os
import sys

import torch

from . import dist
from .learner import Learner
from .server import Server, serve_follower


def parse_listen(s):
    host, sep, port = s.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"--listen {s!r} must be HOST:PORT")
    return host.strip("[]"), int(port)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="agentrl_learner", description=__doc__)
    ap.add_argument("--listen", type=parse_listen, required=True, help="HOST:PORT (loopback unless --key-env names a key)")
    ap.add_argument("--model", required=True, help="Hugging Face checkpoint folder (config.json, safetensors)")
    ap.add_argument("--state", help="a saved state folder to start from (weights and optimizer)")
    ap.add_argument("--reference", help="checkpoint folder of the frozen reference policy")
    ap.add_argument("--adapter", help="a PEFT LoRA adapter folder: the adapter alone trains, the model is frozen")
    ap.add_argument("--activation-checkpointing", action="store_true", help="recompute each block's activations in the backward pass")
    ap.add_argument("--value-head", action="store_true", help="add a zero value head when the checkpoint has none")
    ap.add_argument("--key-env", default="", help="environment variable holding the key clients must send")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--bf16", action="store_true", help="bf16 autocast (CUDA)")
    ap.add_argument("--max-tokens", type=int, default=16384, help="padded positions per micro-batch")
    ap.add_argument("--beta1", type=float, default=0.9)
    ap.add_argument("--beta2", type=float, default=0.99)
    ap.add_argument("--eps", type=float, default=1e-8)
    ap.add_argument("--weight-decay", type=float, default=0.0)
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    ap.add_argument("--ready-file", help="written with HOST:PORT once listening")
    ap.add_argument("--fsdp", action="store_true",
                    help="FSDP2 under torchrun: each block and the model fully_shard-ed over the ranks, rank 0 serves (torch >= 2.4)")
    ap.add_argument("--dist-timeout", type=float, default=600, help="seconds a collective may wait for the other ranks (--fsdp)")
    ap.add_argument("--verbose", action="store_true")
    a = ap.parse_args(argv)
    key = ""
    if a.key_env:
        key = os.environ.get(a.key_env, "")
        if not key:
            ap.error(f"--key-env {a.key_env}: the variable is unset or empty")
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    fsdp, rank, device = None, 0, a.device
    try:
        if a.fsdp:
            fsdp = dist.require_fsdp2()
            rank, _, device = dist.init(a.device, a.dist_timeout)
        learner = Learner(a.model, device=device, bf16=a.bf16, max_tokens=a.max_tokens, reference_dir=a.reference,
                          beta1=a.beta1, beta2=a.beta2, eps=a.eps, weight_decay=a.weight_decay, value_head=a.value_head,
                          adapter_dir=a.adapter, activation_checkpointing=a.activation_checkpointing, fsdp=fsdp, rank=rank)
        if a.state:
            learner.load_state(a.state)
        if rank != 0:
            serve_follower(learner)
            return 0
        srv = Server(a.listen, learner, key=key, verbose=a.verbose)
        if fsdp is not None:
            srv.fanout = dist.broadcast_request
    except (ValueError, OSError) as e:
        print(f"agentrl_learner: {e}", file=sys.stderr)
        return 2
    host, port = srv.server_address[:2]
    print(f"agentrl_learner: listening on {host}:{port}, epoch {srv.epoch}, {learner.num_params()} parameters on {learner.device}"
          f" (torch {torch.__version__})", file=sys.stderr, flush=True)
    if a.ready_file:
        tmp = a.ready_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(f"{host}:{port}\n")
        os.replace(tmp, a.ready_file)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        srv.server_close()
        if fsdp is not None:
            dist.broadcast_request(dist.STOP, b"")
    return 0


if __name__ == "__main__":
    sys.exit(main())
