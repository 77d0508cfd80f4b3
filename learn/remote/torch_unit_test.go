package remote

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The PyTorch learner's own unit tests (learners/torch/tests): among them, that its multi-tensor
// AdamW step is bit for bit the per-tensor formula (and so the Go kernel's operation order).
func TestTorchPythonUnit(t *testing.T) {
	root, err := filepath.Abs("../../learners/torch")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, "-m", "unittest", "discover", "-s", "tests", "-t", ".")
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil && strings.Contains(string(out), "No module named 'torch'") {
		skipWithoutTorch(t, err)
		t.Skipf("the PyTorch learner's tests need torch for %s", python)
	}
	skipWithoutTorch(t, nil)
	if err != nil {
		t.Fatalf("python -m unittest: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "OK") {
		t.Fatalf("python -m unittest did not report OK:\n%s", out)
	}
}
