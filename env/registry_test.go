package env

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func testSpec(name string) Spec {
	return Spec{
		Name: name, Train: SeedRange{Lo: 0, Hi: 10}, Heldout: SeedRange{Lo: 10, Hi: 12},
		New:    func() (Env, error) { return &echoEnv{}, nil },
		Expert: func(int64, float64, *rand.Rand) Agent { return nil },
		Corpus: func(n int) []string { return make([]string, n) },
	}
}

func TestRegistry(t *testing.T) {
	r := NewRegistry()
	for _, n := range []string{"b", "a"} {
		if err := r.Register(testSpec(n)); err != nil {
			t.Fatal(err)
		}
	}
	if got := r.Names(); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("names %v", got)
	}
	if s, err := r.Lookup("a"); err != nil || s.Name != "a" {
		t.Fatalf("lookup a: %+v %v", s, err)
	}
	if e, err := r.New("b"); err != nil || e == nil {
		t.Fatalf("new b: %v %v", e, err)
	}
	// An unknown name is an error that lists the valid ones.
	if _, err := r.Lookup("c"); err == nil || !strings.Contains(err.Error(), `"c"`) || !strings.Contains(err.Error(), "a, b") {
		t.Fatalf("unknown name: %v", err)
	}
	if _, err := r.New("c"); err == nil {
		t.Fatal("New of an unknown name succeeded")
	}
	bad := []Spec{testSpec("a"), testSpec(""), {Name: "x"}}
	overlap := testSpec("o")
	overlap.Heldout = SeedRange{Lo: 5, Hi: 15}
	empty := testSpec("e")
	empty.Train = SeedRange{}
	bad = append(bad, overlap, empty)
	for _, s := range bad {
		if err := r.Register(s); err == nil {
			t.Errorf("spec %q registered", s.Name)
		}
	}
	var none *Registry
	if _, err := none.Lookup("a"); err == nil {
		t.Fatal("a nil registry found a name")
	}
}
