package monitor

import "testing"

// The progress line's per-level success: environments, then levels, in order.
func TestDescribeLevels(t *testing.T) {
	got := DescribeLevels(map[envLevel]float64{{"maze", 2}: 0.25, {"calc", 10}: 1, {"calc", 2}: 0.5})
	if want := "calc L2 50% L10 100%, maze L2 25%"; got != want {
		t.Fatalf("%q, want %q", got, want)
	}
	if DescribeLevels(nil) != "" {
		t.Fatal("no levels described as something")
	}
}
