package envref

import (
	"strings"
	"testing"
)

func TestIsRefAndResolve(t *testing.T) {
	for ref, want := range map[string]bool{"${A_1}": true, "${_x}": true, "A": false, "${1A}": false, "$A": false, "${A}x": false, "x${A}": false, "${}": false} {
		if got := IsRef(ref); got != want {
			t.Errorf("IsRef(%q) = %v, want %v", ref, got, want)
		}
	}
	t.Setenv("ENVREF_SET", "s3cret")
	t.Setenv("ENVREF_EMPTY", "")
	if v, err := Resolve("${ENVREF_SET}"); err != nil || v != "s3cret" {
		t.Fatalf("Resolve = %q, %v", v, err)
	}
	for ref, want := range map[string]string{"${ENVREF_EMPTY}": "ENVREF_EMPTY is not set", "${ENVREF_UNSET_X}": "ENVREF_UNSET_X is not set", "literal": "not a ${NAME} reference"} {
		if _, err := Resolve(ref); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Resolve(%q): %v, want %q", ref, err, want)
		}
	}
}
