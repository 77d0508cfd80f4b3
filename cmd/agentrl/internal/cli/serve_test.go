package cli

import (
	"strings"
	"testing"
)

// serve's policy version is --policy-version: it parses (the global --version flag shadowed the
// old name: "unexpected argument 20"), and a blank key is refused.
func TestServeFlags(t *testing.T) {
	dir := t.TempDir()
	out, err := runCLI(t, "serve", "--checkpoint", dir, "--policy-version", "20")
	if err == nil || strings.Contains(err.Error(), "unexpected argument") || !strings.Contains(err.Error(), "config.json") && !strings.Contains(err.Error(), "model.safetensors") {
		t.Fatalf("serve --policy-version 20: %v\n%s", err, out)
	}
	out, err = runCLI(t, "serve", "--checkpoint", dir, "--addr", "0.0.0.0:0", "--api-key", " ")
	if err == nil || !strings.Contains(err.Error(), "key") {
		t.Fatalf("a blank key: %v\n%s", err, out)
	}
}

// `serve --version N`, the name the README once used, says where the policy version went instead
// of "unexpected argument N"; --version alone still prints the build.
func TestServeMisplacedVersion(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{{"serve", "--checkpoint", dir, "--version", "20"}, {"serve", "--version=20", "--checkpoint", dir}} {
		out, err := runCLI(t, args...)
		if err == nil || !strings.Contains(err.Error(), "--policy-version 20") {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
	if out, err := runCLI(t, "--version"); err != nil || !strings.Contains(out, "agentrl") {
		t.Fatalf("--version: %v\n%s", err, out)
	}
}
