package checkpoint_test

import (
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/agentrl/agentrl/checkpoint"
)

func ExampleWriteSafetensors() {
	dir, err := os.MkdirTemp("", "example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "x.safetensors")
	err = checkpoint.WriteSafetensors(path, []checkpoint.Tensor{
		{Name: "model.norm.weight", Shape: []int{3}, Data: []float32{1, 1, 1}},
		{Name: "proj.weight", Shape: []int{2, 3}, Data: []float32{1, 2, 3, 4, 5, 6}},
	}, map[string]string{"format": "pt"})
	if err != nil {
		log.Fatal(err)
	}
	tensors, meta, err := checkpoint.ReadSafetensors(path)
	if err != nil {
		log.Fatal(err)
	}
	p := tensors["proj.weight"]
	fmt.Println(meta["format"], p.DType, p.Shape, p.Data)
	// Output: pt F32 [2 3] [1 2 3 4 5 6]
}
