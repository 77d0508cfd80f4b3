package all

import (
	"slices"
	"testing"
)

func TestBuiltins(t *testing.T) {
	a, b := Builtins(), Builtins()
	if got, want := a.Names(), []string{"calc", "calc-notool", "code", "ledger", "maze", "parts", "search"}; !slices.Equal(got, want) {
		t.Fatalf("built-in environments %v, want %v", got, want)
	}
	s, err := a.Lookup("calc")
	if err != nil {
		t.Fatal(err)
	}
	// Each call is a fresh registry: registering into one leaves the other alone.
	s.Name = "calc-copy"
	if err := a.Register(s); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Lookup("calc-copy"); err == nil {
		t.Fatal("a registration leaked into another registry")
	}
}
