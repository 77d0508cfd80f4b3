"""Runs learners/torch/agentrl_learner/modeling.py (plain PyTorch) on checkpoint folders for
checkpoint's family test, and writes what it computed beside each checkpoint.

Usage: python3 torch_reference.py DIR...
Each DIR holds a Hugging Face checkpoint (and, in DIR/adapter, a PEFT LoRA adapter merged into
it before anything is computed) and tokens.json ({"tokens": [[...], ...]}, B rows of T
token ids). The script writes DIR/torch_out.safetensors (float32) with
  logits          [B, T, V]  the model's logits at every position
  loss            [1]        sum over rows and positions t < T-1 of log p(tokens[t+1] | tokens[:t+1])
  grad.<name>     the gradient of loss with respect to each weight, by Hugging Face name
"""
import json
import os
import sys

import torch

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "..", "learners", "torch"))
from agentrl_learner import modeling  # noqa: E402


def main(dirs):
    torch.manual_seed(0)
    for d in dirs:
        m = modeling.load_model(d)
        if os.path.isdir(os.path.join(d, "adapter")):
            modeling.load_adapter(m, os.path.join(d, "adapter"))
        with open(os.path.join(d, "tokens.json")) as f:
            tokens = torch.tensor(json.load(f)["tokens"], dtype=torch.int64)
        logits = m(tokens)
        logp = torch.log_softmax(logits[:, :-1], dim=-1)
        loss = logp.gather(-1, tokens[:, 1:].unsqueeze(-1)).sum()
        m.zero_grad()
        loss.backward()
        out = {"logits": logits.detach(), "loss": loss.detach().reshape(1)}
        for name, p in m.named_parameters():
            out["grad." + name] = p.grad
        modeling.write_safetensors(os.path.join(d, "torch_out.safetensors"), out)


if __name__ == "__main__":
    main(sys.argv[1:])
