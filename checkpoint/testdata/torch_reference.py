"""Runs a PyTorch implementation on checkpoint folders for checkpoint's family and LoRA tests,
and writes what it computed beside each checkpoint.

Usage: python3 torch_reference.py DIR...
Each DIR holds a Hugging Face checkpoint (and, in DIR/adapter, a PEFT LoRA adapter merged into
it before anything is computed) and tokens.json ({"tokens": [[...], ...]}, B rows of T
token ids). The script writes DIR/torch_out.safetensors (float32) with
  logits          [B, T, V]  the model's logits at every position
  loss            [1]        sum over rows and positions t < T-1 of log p(tokens[t+1] | tokens[:t+1])
  grad.<name>     the gradient of loss with respect to each weight, by Hugging Face name

The implementation is learners/torch/agentrl_learner/modeling.py (plain PyTorch, Debian's
python3-torch) unless AGENTRL_REFERENCE=transformers: then it is Hugging Face transformers'
AutoModelForCausalLM in float32, with the adapter merged by PEFT (merge_and_unload), on the
device AGENTRL_REFERENCE_DEVICE names (cpu by default; cuda on a GPU machine, TF32 off). That
mode is scripts/gpu-check's, where transformers and PEFT are installed.
"""
import json
import os
import sys

import torch

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "..", "learners", "torch"))
from agentrl_learner import modeling  # noqa: E402


def load_modeling(d, device):
    m = modeling.load_model(d)
    if os.path.isdir(os.path.join(d, "adapter")):
        modeling.load_adapter(m, os.path.join(d, "adapter"))
    return m.to(device)


def load_transformers(d, device):
    from agentrl_learner import hfcheck

    m = hfcheck.load_hf(d, torch.float32, "eager")
    if os.path.isdir(os.path.join(d, "adapter")):
        import peft

        m = peft.PeftModel.from_pretrained(m, os.path.join(d, "adapter")).merge_and_unload()
        m.requires_grad_(True)  # PEFT froze the base; the test compares the merged weights' gradients
    m = m.to(device)
    m.config.use_cache = False
    return m


def main(dirs):
    torch.manual_seed(0)
    impl = os.environ.get("AGENTRL_REFERENCE", "modeling")
    device = os.environ.get("AGENTRL_REFERENCE_DEVICE", "cpu")
    if device.startswith("cuda"):
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    if impl not in ("modeling", "transformers"):
        sys.exit(f"AGENTRL_REFERENCE={impl!r}: want modeling or transformers")
    if impl == "transformers":
        import transformers

        print(f"reference: transformers {transformers.__version__}, torch {torch.__version__}, on {device}", file=sys.stderr)
    for d in dirs:
        m = load_transformers(d, device) if impl == "transformers" else load_modeling(d, device)
        with open(os.path.join(d, "tokens.json")) as f:
            tokens = torch.tensor(json.load(f)["tokens"], dtype=torch.int64, device=device)
        out = m(tokens)
        logits = out.logits if hasattr(out, "logits") else out
        logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
        loss = logp.gather(-1, tokens[:, 1:].unsqueeze(-1)).sum()
        m.zero_grad()
        loss.backward()
        res = {"logits": logits.detach().float().cpu(), "loss": loss.detach().reshape(1).cpu()}
        for name, p in m.named_parameters():
            if p.grad is not None:
                res["grad." + name] = p.grad.float().cpu()
        modeling.write_safetensors(os.path.join(d, "torch_out.safetensors"), res)


if __name__ == "__main__":
    main(sys.argv[1:])
