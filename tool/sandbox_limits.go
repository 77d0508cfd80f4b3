package tool

import (
	"errors"
	"fmt"
	"time"
)

// SandboxLimits bounds one sandboxed Python run. Every field must be positive; the zero value is
// not valid, start from DefaultSandboxLimits.
type SandboxLimits struct {
	// Timeout is the wall-clock limit of one run; the caller's context may shorten it.
	Timeout time.Duration `json:"timeout"`
	// CPUSeconds is RLIMIT_CPU: the run is killed with SIGXCPU after this much CPU time.
	CPUSeconds int `json:"cpu_seconds"`
	// MemoryBytes is RLIMIT_AS, the address-space limit; Python raises MemoryError past it.
	MemoryBytes int64 `json:"memory_bytes"`
	// Processes is RLIMIT_NPROC inside the sandbox's user namespace (tasks of the sandbox uid,
	// the interpreter included); fork fails with EAGAIN past it.
	Processes int `json:"processes"`
	// FileBytes is RLIMIT_FSIZE, the largest file the code may write.
	FileBytes int64 `json:"file_bytes"`
	// OpenFiles is RLIMIT_NOFILE.
	OpenFiles int `json:"open_files"`
	// TmpBytes bounds the tmpfs mounted on /tmp, the only writable place.
	TmpBytes int64 `json:"tmp_bytes"`
	// OutputBytes caps what is kept of stdout and of stderr (each); the rest is dropped and
	// marked. A run that writes more than outputKillFactor times this is killed early.
	OutputBytes int `json:"output_bytes"`
	// CodeBytes bounds the size of the source text.
	CodeBytes int `json:"code_bytes"`
}

// outputKillFactor: a run whose output exceeds OutputBytes by this factor gains nothing by
// running on (everything past the cap is dropped), so it is killed rather than left to burn
// its CPU budget printing.
const outputKillFactor = 64

// DefaultSandboxLimits are sized for short exercises: a few seconds of CPU, 256 MiB of address
// space and 8 KiB of output per stream.
func DefaultSandboxLimits() SandboxLimits {
	return SandboxLimits{
		Timeout:     10 * time.Second,
		CPUSeconds:  5,
		MemoryBytes: 256 << 20,
		Processes:   16,
		FileBytes:   1 << 20,
		OpenFiles:   64,
		TmpBytes:    4 << 20,
		OutputBytes: 8 << 10,
		CodeBytes:   64 << 10,
	}
}

// Validate reports the first unusable limit.
func (l SandboxLimits) Validate() error {
	var errs []error
	check := func(name string, ok bool) {
		if !ok {
			errs = append(errs, fmt.Errorf("sandbox limits: %s must be positive", name))
		}
	}
	check("timeout", l.Timeout > 0)
	check("cpu_seconds", l.CPUSeconds > 0)
	check("memory_bytes", l.MemoryBytes > 0)
	check("file_bytes", l.FileBytes > 0)
	check("open_files", l.OpenFiles > 0)
	check("tmp_bytes", l.TmpBytes > 0)
	check("output_bytes", l.OutputBytes > 0)
	check("code_bytes", l.CodeBytes > 0)
	// The interpreter and the sandbox's init process count against RLIMIT_NPROC, so fewer
	// than 3 would not even start the code.
	if l.Processes < 3 {
		errs = append(errs, fmt.Errorf("sandbox limits: processes must be at least 3, got %d", l.Processes))
	}
	// Python 3 needs a few tens of MiB of address space just to start.
	if l.MemoryBytes > 0 && l.MemoryBytes < 32<<20 {
		errs = append(errs, fmt.Errorf("sandbox limits: memory_bytes must be at least 32 MiB, got %d", l.MemoryBytes))
	}
	if l.OpenFiles > 0 && l.OpenFiles < 16 {
		errs = append(errs, fmt.Errorf("sandbox limits: open_files must be at least 16, got %d", l.OpenFiles))
	}
	return errors.Join(errs...)
}
