//go:build !linux

package model

// processCPUSeconds is unavailable here; BenchmarkDecode then omits its CPU figure.
func processCPUSeconds() float64 { return 0 }
