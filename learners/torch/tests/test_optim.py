"""The multi-tensor optimizer step is bit for bit the per-tensor formula it replaced."""

import copy
import math
import os
import tempfile
import unittest

import torch

from agentrl_learner import learner, modeling
from agentrl_learner.learner import f32


def reference_step(named, grads, m, v, steps, lr, clip, beta1, beta2, eps, wd):
    """The per-tensor step of Learner.optim_step before the multi-tensor rewrite (16 element-wise
    kernels per tensor), kept here as the specification. Returns (norm, steps)."""
    lr, clip = f32(lr), f32(clip)
    squares = [(g.double() ** 2).sum() for g in grads.values()]
    total = float(torch.stack(squares).sum())
    norm = f32(math.sqrt(total))
    if clip > 0 and norm > clip:
        scale = f32(clip / f32(norm + f32(1e-6)))
        for g in grads.values():
            g.mul_(scale)
    steps += 1
    bc1 = f32(1 - beta1 ** steps)
    bc2 = f32(1 - beta2 ** steps)
    step = f32(lr / bc1)
    inv_bc2 = f32(1 / bc2)
    b1, omb1 = beta1, f32(1 - beta1)
    b2, omb2 = beta2, f32(1 - beta2)
    with torch.no_grad():
        for n, p in named.items():
            g, mm, vv = grads[n], m[n], v[n]
            mm.mul_(b1).add_(g * omb1)
            vv.mul_(b2).add_((g * omb2) * g)
            decay = f32(1 - f32(lr * wd)) if p.dim() == 2 else 1.0
            upd = (mm * step) / (torch.sqrt(vv * inv_bc2) + eps)
            p.mul_(decay).sub_(upd.to(p.dtype))
    return norm, steps


def same_bits(a, b):
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(a.view(torch.int32), b.view(torch.int32))


SHAPES = [(37, 19), (64,), (3, 5, 7), (1,), (128, 33), (1000,), (2, 1)]


class AdamWUpdate(unittest.TestCase):
    def run_case(self, seed, lr, wd, clip, group, device="cpu"):
        gen = torch.Generator().manual_seed(seed)
        beta1, beta2, eps = f32(0.9), f32(0.99), f32(1e-8)

        def rnd(shape, scale):
            return (torch.randn(shape, generator=gen) * scale).to(device)

        params = {f"t{i}": rnd(s, 0.5) for i, s in enumerate(SHAPES)}
        m = {n: torch.zeros_like(p) for n, p in params.items()}
        v = {n: torch.zeros_like(p) for n, p in params.items()}
        ref_p, ref_m, ref_v = copy.deepcopy(params), copy.deepcopy(m), copy.deepcopy(v)
        steps = ref_steps = 0
        saved = learner.FOREACH_GROUP
        learner.FOREACH_GROUP = group
        try:
            for k in range(4):
                # gradients from tiny to large, some exact zeros, so clipping applies at some steps
                grads = {n: rnd(p.shape, 10.0 ** (k - 2)) for n, p in params.items()}
                grads["t1"][::3] = 0
                ref_norm, ref_steps = reference_step(ref_p, {n: g.clone() for n, g in grads.items()}, ref_m, ref_v,
                                                     ref_steps, lr, clip, beta1, beta2, eps, wd)
                names = list(params)
                gl = [grads[n].clone() for n in names]
                total = float(torch.stack([(g.double() ** 2).sum() for g in gl]).sum())
                norm = f32(math.sqrt(total))
                self.assertEqual(norm, ref_norm)
                if clip > 0 and norm > clip:
                    torch._foreach_mul_(gl, f32(f32(clip) / f32(norm + f32(1e-6))))
                steps += 1
                bc1, bc2 = f32(1 - beta1 ** steps), f32(1 - beta2 ** steps)
                learner.adamw_update([params[n] for n in names], gl, [m[n] for n in names], [v[n] for n in names],
                                     [params[n].dim() == 2 for n in names], lr=f32(lr), wd=f32(wd), beta1=beta1,
                                     beta2=beta2, eps=eps, step=f32(f32(lr) / bc1), inv_bc2=f32(1 / bc2))
                for n in names:
                    for what, got, want in (("param", params[n], ref_p[n]), ("m", m[n], ref_m[n]), ("v", v[n], ref_v[n])):
                        self.assertTrue(same_bits(got, want), f"seed {seed} step {k}: {what} {n} differs from the per-tensor step")
        finally:
            learner.FOREACH_GROUP = saved

    CASES = ((1, 1e-3, 0.0, 0.0, 1 << 26), (2, 3e-4, 0.1, 1.0, 1 << 26), (3, 1e-2, 0.01, 0.5, 100),
             (4, 0.0, 0.1, 1.0, 1), (5, 7e-5, 0.05, 1e6, 2000))

    def test_bitwise(self):
        for case in self.CASES:
            self.run_case(*case)

    @unittest.skipUnless(torch.cuda.is_available(), "no CUDA device")
    def test_bitwise_cuda(self):
        """On a GPU the multi-tensor kernels against the per-tensor ones, both on the device."""
        for case in self.CASES:
            self.run_case(*case, device="cuda")

    def test_groups(self):
        self.assertEqual([list(r) for r in learner._groups([5, 5, 5, 20, 1], 10)], [[0, 1], [2], [3], [4]])
        self.assertEqual(learner._groups([], 10), [])


class LearnerStep(unittest.TestCase):
    """Learner.optim_step on a model's real gradients equals the per-tensor formula."""

    def test_learner_bitwise(self):
        torch.manual_seed(0)
        cfg = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_act": "silu",
               "max_position_embeddings": 256, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "hidden_size": 32,
               "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
               "vocab_size": 97, "tie_word_embeddings": False, "torch_dtype": "float32"}
        with tempfile.TemporaryDirectory() as tmp:
            modeling.save_model(modeling.from_config(cfg), tmp, dtype=torch.float32)
            L = learner.Learner(tmp, weight_decay=0.1, value_head=True)
        named = L.named_tensors()
        ref_p = {n: p.detach().clone() for n, p in named.items()}
        ref_m, ref_v = copy.deepcopy(L.m), copy.deepcopy(L.v)
        ref_steps = 0
        gen = torch.Generator().manual_seed(7)
        for k, (lr, clip) in enumerate(((1e-3, 1.0), (5e-4, 0.0), (1e-3, 1e-3))):
            inp = torch.randint(0, 97, (3, 17), generator=gen)
            h = L.model.hidden_states(inp)
            loss = torch.log_softmax(L._logits(L.model, h), -1)[..., 0].mean()
            loss = loss + (h @ L.value[learner.VALUE_WEIGHT].t() + L.value[learner.VALUE_BIAS]).mean()
            loss.backward()
            grads = {n: (p.grad.clone() if p.grad is not None else torch.zeros_like(p)) for n, p in named.items()}
            ref_norm, ref_steps = reference_step(ref_p, grads, ref_m, ref_v, ref_steps, lr, clip,
                                                 L.beta1, L.beta2, L.eps, L.wd)
            norm, _ = L.optim_step(lr, clip)
            self.assertEqual(norm, ref_norm)
            self.assertEqual(L.steps, ref_steps)
            for n, p in named.items():
                self.assertTrue(same_bits(p.detach(), ref_p[n]), f"step {k}: {n} differs")
                self.assertTrue(same_bits(L.m[n], ref_m[n]) and same_bits(L.v[n], ref_v[n]), f"step {k}: moments of {n}")


if __name__ == "__main__":
    unittest.main()
