package infer_test

import (
	"fmt"

	"github.com/agentrl/agentrl/infer"
)

func ExampleSampling_Exact() {
	for _, s := range []infer.Sampling{{Temperature: 1}, {Temperature: 0.7}, {Temperature: 1, TopK: 40}} {
		fmt.Println(s.Exact())
	}
	// Output:
	// true
	// false
	// false
}
