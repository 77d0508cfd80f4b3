package dataset

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"
)

// The readers take any bytes: a dataset or an error, never a panic; every task kept has a
// non-empty prompt, valid UTF-8 and a unique id, and the split is non-empty on both sides. The
// default suite runs the seeds; `go test -run=^$ -fuzz=FuzzReadJSONL ./env/dataset` explores.
func FuzzReadJSONL(f *testing.F) {
	f.Add([]byte(jsonlOf(6)), false)
	f.Add([]byte(`{"id":"1","question":"a","answer":1}`+"\n"+`{"id":"1","question":"b","answer":[1,"x",true]}`), true)
	f.Add([]byte("{\"question\":\"\xff\",\"answer\":1}\n{}\n[]\nnull\n\"x\"\n{\"question\":{}}"), false)
	f.Fuzz(func(t *testing.T, data []byte, strict bool) {
		c := Config{Path: "d.jsonl", Prompt: "Q {question} {{x}}", Answer: "answer", ID: "id", Split: Split{HeldOut: 0.5},
			Verifier: "exact", Strict: strict, MaxLineBytes: 1 << 12, MaxRows: 100}
		checkData(t, c, data)
	})
}

func FuzzReadCSV(f *testing.F) {
	f.Add([]byte("id,question,answer\n1,a,2\n2,b,3\n3,c,4\n"), false)
	f.Add([]byte("id,question,answer\n1,\"a\nb\",2\n2,\"\"\"x,3\n3,c\n"), true)
	f.Add([]byte("id,id\n1,2\n"), false)
	f.Fuzz(func(t *testing.T, data []byte, strict bool) {
		c := Config{Path: "d.csv", Prompt: "question", Answer: "answer", ID: "id", Split: Split{HeldOut: 0.5},
			Verifier: "set", Strict: strict, MaxLineBytes: 1 << 12, MaxRows: 100}
		checkData(t, c, data)
	})
}

func FuzzReadParquet(f *testing.F) {
	f.Add([]byte("PAR1"))
	f.Add([]byte("PAR1\x00\x00\x00\x00PAR1"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c := Config{Path: "d.parquet", Prompt: "question", Answer: "answer", Split: Split{HeldOut: 0.5}, Verifier: "exact", MaxRows: 100}
		d, err := readParquet(bytes.NewReader(data), int64(len(data)), c)
		if err == nil {
			checkTasks(t, d)
		}
	})
}

func checkData(t *testing.T, c Config, data []byte) {
	d, err := Read(bytes.NewReader(data), c)
	if err != nil {
		return
	}
	checkTasks(t, d)
}

func checkTasks(t *testing.T, d *Data) {
	ids := map[string]bool{}
	for _, tk := range d.Tasks {
		if strings.TrimSpace(tk.Prompt) == "" || ids[tk.ID] || !utf8.ValidString(tk.Prompt+tk.Answer+tk.ID) {
			t.Fatalf("task %+v kept", tk)
		}
		ids[tk.ID] = true
	}
	if d.Train == 0 || d.Train == len(d.Tasks) {
		t.Fatalf("split %d of %d", d.Train, len(d.Tasks))
	}
}
