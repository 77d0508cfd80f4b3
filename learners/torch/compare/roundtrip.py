# The round trip of one small call through the learner's HTTP server, per tree (argv[1:], e.g. OLD
# NEW OLD NEW): the learner started from that tree on the tiny bench model (CPU, one thread), one
# /v1/forward of a 16-token sequence, 100 calls after 5 warm-ups through http.client (the bench's
# client); one JSON line per tree with the median and mean.
import json, os, statistics, subprocess, sys, tempfile, time
import torch
import versions  # this folder's: an old and a new tree side by side
if len(sys.argv) < 2:
    sys.exit(__doc__ or "usage: see README.md")
for tree in sys.argv[1:]:
    bench, modeling, wire = versions.load(tree, "bench", "modeling", "wire")
    with tempfile.TemporaryDirectory() as tmp:
        torch.manual_seed(0)
        modeling.save_model(modeling.from_config(bench.config("tiny")), tmp + "/m", dtype=torch.float32)
        env = dict(os.environ, PYTHONPATH=os.path.abspath(tree))
        p = subprocess.Popen([sys.executable, "-m", "agentrl_learner", "--listen", "127.0.0.1:0", "--ready-file", tmp + "/r",
                              "--model", tmp + "/m", "--device", "cpu", "--threads", "1"], env=env, stderr=subprocess.DEVNULL)
        try:
            t0 = time.time()
            while not os.path.exists(tmp + "/r"):
                if p.poll() is not None or time.time() - t0 > 60:
                    sys.exit(f"the learner of {tree} did not start")
                time.sleep(0.05)
            host, port = open(tmp + "/r").read().strip().rsplit(":", 1)
            c = bench.Client(host, int(port), 60)
            body = wire.encode_request(wire.KIND_FORWARD, 0, [0, 16], list(range(16)), [True] * 16)
            ts = []
            for k in range(105):
                t = time.perf_counter()
                c.post("/v1/forward", body, "application/octet-stream")
                if k >= 5:
                    ts.append(time.perf_counter() - t)
        finally:
            p.terminate()
            p.wait()
    print(json.dumps({"tree": tree, "calls": len(ts), "median_ms": round(statistics.median(ts) * 1e3, 2),
                      "mean_ms": round(statistics.mean(ts) * 1e3, 2)}), flush=True)
