package model

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// MemoryUse is what a process does with a model, for EstimateMemory.
type MemoryUse struct {
	// Train: the model keeps gradients and AdamW's two moments beside its weights, and the
	// activations of TrainTokens tokens a step (TargetTokens of them with logits; 0 is all).
	Train        bool
	TrainTokens  int
	TargetTokens int
	// LoRA, when set, trains adapters of this configuration instead of the weights: gradients
	// and moments are the adapters' (the base's gradients are allocated but never written, so
	// they take no memory).
	LoRA *LoRAConfig
	// A KV cache of CacheSlots sequences of CacheLen tokens in CachePrecision, and packed decode
	// weights in DecodeWeights ("" for none).
	CacheSlots, CacheLen int
	CachePrecision       Precision
	DecodeWeights        Precision
}

// MemoryEstimate is the memory a model takes for a MemoryUse, in bytes, by part.
type MemoryEstimate struct {
	Weights     int64 // float32 weights
	Grads       int64 // float32 gradients (every model has them)
	Optimizer   int64 // AdamW's moments
	Activations int64 // what a training step keeps for its backward pass, its scratch and logits
	KVCache     int64
	Decode      int64 // the packed copy of the weights decode steps read
}

// Total is the sum of the parts.
func (e MemoryEstimate) Total() int64 {
	return e.Weights + e.Grads + e.Optimizer + e.Activations + e.KVCache + e.Decode
}

// String lists the parts in GiB.
func (e MemoryEstimate) String() string {
	g := func(b int64) string { return fmt.Sprintf("%.2f GiB", float64(b)/(1<<30)) }
	s := fmt.Sprintf("weights %s, gradients %s", g(e.Weights), g(e.Grads))
	if e.Optimizer > 0 {
		s += ", AdamW moments " + g(e.Optimizer)
	}
	if e.Activations > 0 {
		s += ", activations " + g(e.Activations)
	}
	if e.KVCache > 0 {
		s += ", KV cache " + g(e.KVCache)
	}
	if e.Decode > 0 {
		s += ", decode weights " + g(e.Decode)
	}
	return s + ": total " + g(e.Total())
}

// EstimateMemory estimates the memory a model of c takes for u, computed without allocating
// from the sizes of the model's own buffers (trainWorkspace, KVCache, decodeWeights). c must be
// valid.
func (c Config) EstimateMemory(u MemoryUse) MemoryEstimate {
	n := c.NumParams()
	e := MemoryEstimate{Weights: 4 * n, Grads: 4 * n}
	if u.LoRA != nil {
		a := c.LoRAParams(*u.LoRA)
		e.Weights += 4 * a
		e.Grads = 4 * a
		n = a
	}
	if u.Train {
		e.Optimizer = 8 * n
		tgt := u.TargetTokens
		if tgt <= 0 || tgt > u.TrainTokens {
			tgt = u.TrainTokens
		}
		e.Activations = int64(u.TrainTokens)*c.trainBytesPerToken() + int64(tgt)*4*int64(c.Vocab+c.Dim+8)
	}
	if u.CacheSlots > 0 && u.CacheLen > 0 {
		e.KVCache = c.KVCacheBytesAs(u.CacheSlots, min(u.CacheLen, c.MaxSeq), u.CachePrecision)
	}
	if u.DecodeWeights != "" {
		matrices := n - int64(c.Layers)*int64(2*c.Dim) - int64(c.Dim) // all but the norms
		if !c.TieEmbeddings {
			matrices -= int64(c.Vocab) * int64(c.Dim) // the embedding is read unpacked
		}
		size := int64(4)
		if !u.DecodeWeights.Exact() {
			size = 2
		}
		e.Decode = size * matrices
	}
	return e
}

// trainBytesPerToken is what trainWorkspace holds per token of a training batch: per layer the
// residual stream, both norms' outputs and factors, q/k/v, the log-sum-exps, the attention
// output, the gate/up products and SwiGLU (and the q/k norms' inputs), and once the gradient
// scratch and the final norm.
func (c Config) trainBytesPerToken() int64 {
	C, Q, A, H := int64(c.Dim), int64(c.qkvDim()), int64(c.attnDim()), int64(c.Hidden)
	heads := int64(c.Heads)
	layer := 4*C + Q + heads + A + 3*H + 2
	if c.QKNorm {
		hk := int64(c.Heads + c.KVHeads)
		layer += hk*int64(c.HeadDim()) + hk
		layer += int64(c.KVHeads) * 2 * int64(c.HeadDim()) // the norms' gradient partials
	}
	once := C /* res[L] */ + 2*C /* lnf, rstd */ + 2*C + Q + A + 3*H /* gradient scratch */
	return 4 * (int64(c.Layers)*layer + once)
}

// MachineMemory is the memory this process may use: the machine's (MemTotal of /proc/meminfo),
// or its cgroup's limit when lower; 0 where neither can be read.
func MachineMemory() int64 {
	var total int64
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		total = parseMemTotal(data)
	}
	for _, p := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		v, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
		if err == nil && v > 0 && (total == 0 || v < total) {
			total = v
		}
	}
	return total
}

// parseMemTotal reads MemTotal (kB) from /proc/meminfo's text, in bytes; 0 when absent.
func parseMemTotal(data []byte) int64 {
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == "MemTotal:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil || kb <= 0 || kb > 1<<50 {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}

// CheckMemory refuses an estimate whose total exceeds limit bytes (0: MachineMemory(); no
// check when that is unknown), saying what takes the memory.
func (e MemoryEstimate) CheckMemory(limit int64) error {
	what := "a ceiling of"
	if limit <= 0 {
		limit, what = MachineMemory(), "this machine's"
	}
	if limit > 0 && e.Total() > limit {
		return fmt.Errorf("model: memory estimate (%s) exceeds %s %.2f GiB", e, what, float64(limit)/(1<<30))
	}
	return nil
}
