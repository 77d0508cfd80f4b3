"""The learner's cost checks: the server answers without Nagle's delay, the finite check names the
first broken tensor, phase timing falls back to the wall clock on a CPU, and the bench's breakdown
times the learner and the plain loop by the same phases."""

import http.client
import json
import socket
import tempfile
import threading
import unittest

import torch

from agentrl_learner import bench, learner, modeling, server


class NoDelay(unittest.TestCase):
    def test_answers_are_sent_without_nagle(self):
        """Each accepted connection has TCP_NODELAY, so an answer's body (written after its
        headers) is not held back until the client acknowledges the headers."""
        seen = []
        base = server.Handler

        class Recording(base):
            def setup(self):
                super().setup()
                seen.append(self.connection.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))

        srv = server.Server(("127.0.0.1", 0), learner=None)
        srv.RequestHandlerClass = Recording
        t = threading.Thread(target=srv.serve_forever, daemon=True)
        t.start()
        try:
            c = http.client.HTTPConnection("127.0.0.1", srv.server_address[1], timeout=10)
            for _ in range(3):  # the epoch is wrong: answered before the learner is touched
                c.request("POST", "/v1/optim_step", body=b"{}", headers={"Content-Type": "application/json"})
                r = c.getresponse()
                self.assertEqual(r.status, 409)
                self.assertEqual(json.loads(r.read())["code"], "epoch")
            c.close()
        finally:
            srv.shutdown()
            srv.server_close()
        self.assertEqual(len(seen), 1, "one keep-alive connection")
        self.assertNotEqual(seen[0], 0, "TCP_NODELAY is not set on the learner's connections")


class NonFinite(unittest.TestCase):
    def test_first_broken_tensor(self):
        ts = [torch.ones(5), torch.zeros(3, 4), torch.full((7,), 2.0)]
        self.assertIsNone(learner.non_finite(ts))
        self.assertIsNone(learner.non_finite([]))
        for bad in (float("nan"), float("inf"), float("-inf")):
            t = [x.clone() for x in ts]
            t[1][2, 3] = bad
            t[2][0] = bad
            self.assertEqual(learner.non_finite(t), 1, bad)

    def test_finite_values_whose_sum_overflows(self):
        """Finite values whose absolute sum overflows float32 are finite: the slow check decides."""
        big = torch.full((4,), 3e38)
        self.assertIsNone(learner.non_finite([torch.ones(2), big]))
        big[3] = float("nan")
        self.assertEqual(learner.non_finite([torch.ones(2), big]), 1)


class PhaseTiming(unittest.TestCase):
    def test_cpu_wall_clock(self):
        ph = learner.Phases("cpu")
        for _ in range(2):
            with ph("a"):
                sum(range(20000))
        with self.assertRaises(ValueError):
            with ph("b"):
                raise ValueError("the phase still ends")
        ph.collect()
        self.assertGreater(ph.host_s["a"], 0)
        self.assertEqual(ph.device_s["a"], ph.host_s["a"])  # no device clock on a CPU
        self.assertIn("b", ph.device_s)
        ph.reset()
        self.assertEqual(dict(ph.host_s), {})


TINY = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_act": "silu",
        "max_position_embeddings": 512, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "hidden_size": 16,
        "intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
        "vocab_size": 61, "tie_word_embeddings": True, "torch_dtype": "float32"}


class Breakdown(unittest.TestCase):
    def test_learner_and_plain_by_phase(self):
        """The in-process learner and the plain loop on the same batches, timed by phase on a CPU:
        every phase of a step is named, the learner's answers are those of a learner without
        timing, and the table has a row per phase and the totals."""
        torch.manual_seed(0)
        with tempfile.TemporaryDirectory() as tmp:
            modeling.save_model(modeling.from_config(TINY), tmp, dtype=torch.float32)
            bs = bench.batches(61, 3, 5, 8, 40, seed=1)
            bodies = [bench.encode(b) for b in bs]
            s, ph = bench.learner_in_process(tmp, bodies, 61, "cpu", False, 64, fsdp=False)
            plain = learner.Phases("cpu")
            ps = bench.plain_loop(tmp, bs, "cpu", False, 64, phases=plain)
            # timing changes nothing: the same steps without phases give the same weights
            a = learner.Learner(tmp, max_tokens=64, beta2=0.99)
            b = learner.Learner(tmp, max_tokens=64, beta2=0.99)
            b.phases = learner.Phases("cpu")
            for f, fb in bodies:
                for L in (a, b):
                    L.forward(bench.wire.decode_request(f, 61), False, False, False)
                    L.forward_backward(bench.wire.decode_request(fb, 61))
                    L.optim_step(1e-5, 1.0)
            for n, p in a.named_tensors().items():
                self.assertTrue(torch.equal(p, b.named_tensors()[n]), n)
        want = {"decode", "forward.input", "forward.model", "forward.logprob", "forward.answer",
                "forward_backward.input", "forward_backward.model", "forward_backward.logprob",
                "forward_backward.backward", "optim_step.norm", "optim_step.clip", "optim_step.adamw",
                "optim_step.zero_grad", "optim_step.finite"}
        self.assertEqual(set(ph.host_s), want)
        self.assertEqual(set(plain.host_s), {"forward.input", "forward.model", "forward.logprob", "forward_backward.model",
                                             "forward_backward.logprob", "forward_backward.backward", "optim_step.norm",
                                             "optim_step.adamw", "optim_step.zero_grad"})
        self.assertLessEqual(sum(ph.device_s.values()), s * 2 * 1.0001)  # two timed steps
        lines, fig = bench.breakdown("tiny", "cpu", 2, ph, plain, s, ps, s * 1.5)
        text = "\n".join(lines)
        for label, _ in bench.ROWS:
            self.assertIn(label, text)
        self.assertIn("the protocol (HTTP less in process)", text)
        self.assertAlmostEqual(fig["step_learner_in_process"], s * 1e3, places=1)
        self.assertIsNone(fig["wire decode of the request bodies"]["plain"])


if __name__ == "__main__":
    unittest.main()
