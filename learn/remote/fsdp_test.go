package remote

import (
	"errors"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// torchHasFSDP2 reports whether Debian's torch has FSDP2's fully_shard (torch >= 2.4).
func torchHasFSDP2(t *testing.T, root string) bool {
	t.Helper()
	cmd := exec.Command(python, "-c", "from agentrl_learner import dist; print(dist.fully_shard_fn() is not None)")
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	skipWithoutTorch(t, err)
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	return strings.TrimSpace(string(out)) == "True"
}

// --fsdp with a torch that has no fully_shard (Debian's 1.13 here) is refused by name, with the
// version needed; with one that has it, outside torchrun it names what is missing. (FSDP2 on
// GPUs runs in scripts/gpu-check; no machine here has torch >= 2.4.)
func TestTorchFSDPRefusal(t *testing.T) {
	root, err := filepath.Abs("../../learners/torch")
	if err != nil {
		t.Fatal(err)
	}
	has := torchHasFSDP2(t, root)
	dir := filepath.Join(t.TempDir(), "m")
	writeFolder(t, dir, tinyModel(t, 1))
	cmd := exec.Command(python, "-m", "agentrl_learner", "--listen", "127.0.0.1:0", "--model", dir, "--fsdp", "--device", "cpu")
	cmd.Dir = root
	cmd.Env = append(cmd.Environ(), "RANK=", "WORLD_SIZE=")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if err == nil || !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Fatalf("--fsdp: %v, want exit status 2; output %s", err, out)
	}
	want := []string{"--fsdp needs torch >= 2.4", "torch.distributed.fsdp.fully_shard", "this is torch "}
	if has {
		want = []string{"--fsdp runs under torchrun", "MASTER_ADDR"}
	}
	for _, w := range want {
		if !strings.Contains(string(out), w) {
			t.Fatalf("--fsdp output %q does not say %q", out, w)
		}
	}
}

// Under --fsdp every transformer block is wrapped and then the model, whose hidden_states and
// logits are registered as forward methods (dist.shard, with recording stand-ins for FSDP2's
// functions, which this torch lacks); without a process group the
// DTensor helpers are the identity and the gradient norm's sum is the rank's own.
func TestTorchFSDPWrapsBlocksThenModel(t *testing.T) {
	root, err := filepath.Abs("../../learners/torch")
	if err != nil {
		t.Fatal(err)
	}
	torchHasFSDP2(t, root)
	dir := filepath.Join(t.TempDir(), "m")
	m := tinyModel(t, 1)
	writeFolder(t, dir, m)
	script := `
import sys, torch
from agentrl_learner import dist
from agentrl_learner.learner import load_causal_lm
model = load_causal_lm(sys.argv[1])
calls, methods = [], []
dist.shard(model, dist.FSDP2(lambda mod: calls.append(mod), lambda mod, name: methods.append((mod, name))))
blocks = list(model.model.layers)
assert len(calls) == len(blocks) + 1, calls
assert all(a is b for a, b in zip(calls, blocks)) and calls[-1] is model, "order"
assert [n for m, n in methods] == ["hidden_states", "logits"] and all(m is model for m, _ in methods), methods
h = model.hidden_states(torch.tensor([[1, 2, 3]]))
want = model.lm_head(h) if model.lm_head is not None else h @ model.model.embed_tokens.weight.t()
assert torch.equal(model.logits(h), want), "logits"
t = torch.arange(6.0)
assert dist.local(t) is t and dist.full(t) is t and dist.like(t, t) is t and dist.shard_of(t, t) is t
assert dist.all_sum(2.5, "cpu") == 2.5
print("wrapped", len(blocks), "blocks and the model")
`
	cmd := exec.Command(python, "-c", script, dir)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if want := "wrapped " + strconv.Itoa(m.Cfg.Layers) + " blocks and the model"; !strings.Contains(string(out), want) {
		t.Fatalf("output %q, want %q", out, want)
	}
}
