package dataset

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/parquet-go/parquet-go"
)

// BenchmarkLoad reads the same 20,000 rows as JSONL, CSV and Parquet from a file; rows/s is the
// whole load (read, decode, render the prompt, check the answer, split).
//
//	go test -run '^$' -bench Load -benchtime 5x ./env/dataset
func BenchmarkLoad(b *testing.B) {
	const n = 20000
	dir := b.TempDir()
	var jl bytes.Buffer
	var cv bytes.Buffer
	cw := csv.NewWriter(&cv)
	cw.Write([]string{"id", "question", "answer", "level"})
	var rows []pqRow
	for i := range n {
		q := fmt.Sprintf("What is %d + %d?", i, 3*i)
		fmt.Fprintf(&jl, `{"id": "q%d", "question": %q, "answer": %d, "level": %d}`+"\n", i, q, 4*i, 1+i%3)
		cw.Write([]string{fmt.Sprintf("q%d", i), q, fmt.Sprint(4 * i), fmt.Sprint(1 + i%3)})
		rows = append(rows, pqRow{ID: fmt.Sprintf("q%d", i), Question: q, Answer: float64(4 * i), Level: int64(1 + i%3)})
	}
	cw.Flush()
	var pq bytes.Buffer
	w := parquet.NewGenericWriter[pqRow](&pq)
	w.Write(rows)
	w.Close()
	for _, f := range []struct{ name, data string }{{"d.jsonl", jl.String()}, {"d.csv", cv.String()}, {"d.parquet", pq.String()}} {
		path := filepath.Join(dir, f.name)
		if err := os.WriteFile(path, []byte(f.data), 0o644); err != nil {
			b.Fatal(err)
		}
		b.Run(f.name, func(b *testing.B) {
			c := Config{Path: path, Prompt: "Q: {question}", Answer: "answer", ID: "id", Level: "level", Split: Split{HeldOut: 0.1}, Verifier: "numeric"}
			for b.Loop() {
				d, err := Load(c)
				if err != nil || len(d.Tasks) != n {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "rows/s")
			b.ReportMetric(float64(len(f.data)), "file-bytes")
		})
	}
}
