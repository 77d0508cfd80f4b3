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
