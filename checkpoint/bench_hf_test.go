package checkpoint

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentrl/agentrl/model"
)

// qwen25Config is Qwen2.5-0.5B's config.json: 494 M parameters, tied embeddings, q/k/v biases.
func qwen25Config() model.Config {
	return model.Config{Family: model.FamilyQwen2, Vocab: 151936, Dim: 896, Layers: 24, Heads: 14, KVHeads: 2,
		Hidden: 4864, MaxSeq: 32768, RopeTheta: 1000000, NormEps: 1e-6, TieEmbeddings: true, QKVBias: true}
}

// writeBF16Checkpoint writes a checkpoint of cfg in BF16 with random weights straight to disk,
// one tensor at a time (no model in memory), and its config.json.
func writeBF16Checkpoint(tb testing.TB, dir string, cfg model.Config) int64 {
	tb.Helper()
	shapes := cfg.TensorShapes()
	tensors := make([]Tensor, len(shapes))
	for i, s := range shapes {
		tensors[i] = Tensor{Name: s.Name, DType: "BF16", Shape: s.Shape}
	}
	var header bytes.Buffer
	var off int64
	header.WriteString(`{"__metadata__":{"format":"pt"}`)
	for _, t := range tensors {
		n := int64(1)
		for _, d := range t.Shape {
			n *= int64(d)
		}
		shape := joinInts(t.Shape)
		header.WriteString(`,"` + t.Name + `":{"dtype":"BF16","shape":[` + shape + `],"data_offsets":[` +
			strconv.FormatInt(off, 10) + "," + strconv.FormatInt(off+2*n, 10) + "]}")
		off += 2 * n
	}
	header.WriteByte('}')
	for header.Len()%8 != 0 {
		header.WriteByte(' ')
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	f, err := os.Create(filepath.Join(dir, weightsFile))
	if err != nil {
		tb.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	var n8 [8]byte
	binary.LittleEndian.PutUint64(n8[:], uint64(header.Len()))
	w.Write(n8[:])
	w.Write(header.Bytes())
	rng := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 1<<16)
	for left := off; left > 0; {
		k := min(left, int64(len(buf)))
		for i := 0; i < int(k); i += 2 {
			binary.LittleEndian.PutUint16(buf[i:], floatToBF16(float32(rng.NormFloat64()*0.02)))
		}
		w.Write(buf[:k])
		left -= k
	}
	if err := w.Flush(); err != nil {
		tb.Fatal(err)
	}
	f.Close()
	data, err := encodeConfig(cfg, specialIDs{}, "BF16")
	if err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, configFile), data, 0o644); err != nil {
		tb.Fatal(err)
	}
	return off
}

func joinInts(x []int) string {
	s := make([]string, len(x))
	for i, v := range x {
		s[i] = strconv.Itoa(v)
	}
	return strings.Join(s, ",")
}

// peakRSS reads VmHWM, the process's peak resident memory, in bytes; resetPeakRSS lowers it to
// the current RSS (Linux's clear_refs 5).
func peakRSS() int64 {
	data, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmHWM:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

func resetPeakRSS() { os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) }

// BenchmarkLoadQwen25BF16 loads a Qwen2.5-0.5B-shaped checkpoint in BF16 (988 MB) and reports
// the load time and the peak RSS the load added, against the model's own float32 weights and
// gradients (model.EstimateMemory): reading adds no copy of the file.
func BenchmarkLoadQwen25BF16(b *testing.B) {
	if testing.Short() {
		b.Skip("writes and loads a 1 GB checkpoint")
	}
	cfg := qwen25Config()
	dir := filepath.Join(b.TempDir(), "qwen2.5-0.5b")
	fileBytes := writeBF16Checkpoint(b, dir, cfg)
	est := cfg.EstimateMemory(model.MemoryUse{})
	b.SetBytes(fileBytes)
	var peak, base int64
	var secs float64
	for b.Loop() {
		runtime.GC()
		debug.FreeOSMemory()
		resetPeakRSS()
		base = peakRSS()
		t0 := time.Now()
		m, err := LoadModel(dir)
		if err != nil {
			b.Fatal(err)
		}
		secs = time.Since(t0).Seconds()
		peak = peakRSS()
		runtime.KeepAlive(m)
	}
	b.ReportMetric(secs, "s/load")
	b.ReportMetric(float64(peak-base)/(1<<20), "MiB-peak-RSS-added")
	b.ReportMetric(float64(est.Weights+est.Grads)/(1<<20), "MiB-weights+grads")
}
