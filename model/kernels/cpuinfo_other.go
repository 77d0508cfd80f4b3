//go:build !amd64 || purego

package kernels

// cpuidCaches has no CPUID to ask off amd64 (or without the assembly).
func cpuidCaches() (CPUInfo, bool) { return CPUInfo{}, false }

func cpuidBrand() string { return "" }
