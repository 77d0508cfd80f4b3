package checkpoint

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"unicode/utf8"
)

// indexFile is the index of a sharded checkpoint, as transformers writes it: which shard file
// holds each tensor.
const indexFile = "model.safetensors.index.json"

// maxIndexLen bounds the index file read into memory (a 70B model's index is ~100 KB).
const maxIndexLen = 64 << 20

// DefaultMaxShardBytes is the size above which Save splits the weights into shards
// (model-00001-of-0000N.safetensors), transformers' default max_shard_size of 5 GB.
const DefaultMaxShardBytes = 5_000_000_000

// shardIndex is a decoded model.safetensors.index.json.
type shardIndex struct {
	files     []string          // the shard files, sorted, each named once
	weightMap map[string]string // tensor name -> shard file
}

// parseIndex decodes and checks an index: a JSON object whose weight_map maps tensor names to
// shard files, each a plain file name in the checkpoint folder (no path separators, no "." or
// ".."), ending in ".safetensors". Its metadata (total_size and others) is not needed: the
// shards' own headers give every size.
func parseIndex(data []byte) (*shardIndex, error) {
	if !utf8.Valid(data) {
		return nil, errors.New("index is not valid UTF-8")
	}
	var raw struct {
		Metadata  json.RawMessage            `json:"metadata"`
		WeightMap map[string]json.RawMessage `json:"weight_map"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("index JSON: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("index has data after its JSON object")
	}
	if raw.WeightMap == nil {
		return nil, errors.New("index has no weight_map")
	}
	idx := &shardIndex{weightMap: make(map[string]string, len(raw.WeightMap))}
	seen := map[string]bool{}
	for name, v := range raw.WeightMap {
		var file string
		if err := json.Unmarshal(v, &file); err != nil {
			return nil, fmt.Errorf("index: tensor %q: the shard must be a file name: %w", name, err)
		}
		if name == "" {
			return nil, errors.New("index names a tensor with an empty name")
		}
		if file == "" || file == "." || file == ".." || strings.ContainsAny(file, `/\`+"\x00") || !strings.HasSuffix(file, ".safetensors") {
			return nil, fmt.Errorf("index: tensor %q: shard %q is not a .safetensors file name in the checkpoint folder", name, file)
		}
		idx.weightMap[name] = file
		if !seen[file] {
			seen[file] = true
			idx.files = append(idx.files, file)
		}
	}
	sort.Strings(idx.files)
	return idx, nil
}

// shard is one open safetensors file of a checkpoint and its validated header.
type shard struct {
	name string
	f    *os.File
	h    *stHeader
}

// weightFiles opens the weights of a checkpoint folder: model.safetensors, or the shards that
// model.safetensors.index.json lists (the index wins when both are present, as in
// transformers). Every shard's header is validated; a tensor must be in the shard the index
// names, in no other, and every shard tensor must be in the index. The caller closes the shards.
func weightFiles(dir string) ([]shard, error) {
	data, err := readLimited(filepath.Join(dir, indexFile), maxIndexLen)
	if errors.Is(err, os.ErrNotExist) {
		s, err := openShard(dir, weightsFile)
		if err != nil {
			return nil, err
		}
		return []shard{s}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", indexFile, err)
	}
	idx, err := parseIndex(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", indexFile, err)
	}
	var shards []shard
	closeAll := func() {
		for _, s := range shards {
			s.f.Close()
		}
	}
	for _, file := range idx.files {
		s, err := openShard(dir, file)
		if err != nil {
			closeAll()
			if errors.Is(err, os.ErrNotExist) {
				return nil, fmt.Errorf("%s names shard %s (tensor %q among others), which is missing", indexFile, file, firstTensorOf(idx, file))
			}
			return nil, err
		}
		shards = append(shards, s)
		for _, e := range s.h.entries {
			if want, ok := idx.weightMap[e.name]; !ok {
				closeAll()
				return nil, fmt.Errorf("%s: tensor %q is not in %s", file, e.name, indexFile)
			} else if want != file {
				closeAll()
				return nil, fmt.Errorf("%s: tensor %q is there, but %s places it in %s", file, e.name, indexFile, want)
			}
		}
	}
	for name, file := range idx.weightMap {
		found := false
		for _, s := range shards {
			if s.name == file {
				_, found = s.h.byName[name]
			}
		}
		if !found {
			closeAll()
			return nil, fmt.Errorf("%s places tensor %q in %s, which does not hold it", indexFile, name, file)
		}
	}
	return shards, nil
}

// firstTensorOf is the alphabetically first tensor the index places in file.
func firstTensorOf(idx *shardIndex, file string) string {
	first := ""
	for name, f := range idx.weightMap {
		if f == file && (first == "" || name < first) {
			first = name
		}
	}
	return first
}

func openShard(dir, file string) (shard, error) {
	f, err := os.Open(filepath.Join(dir, file))
	if err != nil {
		return shard{}, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return shard{}, fmt.Errorf("%s: %w", file, err)
	}
	h, err := parseHeader(f, fi.Size())
	if err != nil {
		f.Close()
		return shard{}, fmt.Errorf("%s: %w", file, err)
	}
	return shard{name: file, f: f, h: h}, nil
}

// readLimited reads a file of at most limit bytes.
func readLimited(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("larger than %d bytes", limit)
	}
	return data, nil
}

// mergedHeader is the union of the shards' headers, for checkTensorSet; owner maps each tensor
// to its shard. Duplicates across shards are refused (weightFiles already placed each in one).
func mergedHeader(shards []shard) (*stHeader, []int, error) {
	h := &stHeader{byName: map[string]int{}}
	var owner []int
	for si, s := range shards {
		for _, e := range s.h.entries {
			if _, dup := h.byName[e.name]; dup {
				return nil, nil, fmt.Errorf("tensor %q is in two shards (%s and another)", e.name, s.name)
			}
			h.byName[e.name] = len(h.entries)
			h.entries = append(h.entries, e)
			owner = append(owner, si)
		}
	}
	return h, owner, nil
}

// sourceDTypeKey is the safetensors metadata key that keeps, in a float32 resume checkpoint of a
// model loaded from half-precision weights, the dtype those weights came in (model.Model.DType).
const sourceDTypeKey = "agentrl_source_dtype"

// weightsDType is the dtype most of the tensors are stored in (bytes, not count, decide), the
// dtype a model loaded from them is saved in again.
func weightsDType(h *stHeader) string {
	bytesOf := map[string]int64{}
	for _, e := range h.entries {
		bytesOf[e.dtype] += e.end - e.begin
	}
	best := "F32"
	for _, dt := range []string{"BF16", "F16", "F32"} {
		if bytesOf[dt] > bytesOf[best] {
			best = dt
		}
	}
	return best
}

// shardPlan cuts tensors (in order) into shards of at most maxBytes each (a tensor larger than
// that gets a shard of its own), named as transformers names them.
func shardPlan(tensors []Tensor, maxBytes int64) (names []string, groups [][]Tensor) {
	var cur []Tensor
	var size int64
	for _, t := range tensors {
		dt := t.DType
		if dt == "" {
			dt = "F32"
		}
		b := dtypeSize[dt] * int64(len(t.Data))
		if len(cur) > 0 && size+b > maxBytes {
			groups = append(groups, cur)
			cur, size = nil, 0
		}
		cur = append(cur, t)
		size += b
	}
	groups = append(groups, cur)
	if len(groups) == 1 {
		return []string{weightsFile}, groups
	}
	for i := range groups {
		names = append(names, fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, len(groups)))
	}
	return names, groups
}

// writeWeights writes the model's weights (value head excluded) into dir in dtype, in one
// model.safetensors or, above maxBytes, in shards with their index.
func writeWeights(dir string, weights []Tensor, dtype, source string, maxBytes int64) error {
	for i := range weights {
		weights[i].DType = dtype
	}
	names, groups := shardPlan(weights, maxBytes)
	meta := map[string]string{"format": "pt"}
	if source != "" && source != dtype {
		meta[sourceDTypeKey] = source // the dtype an export of these weights goes back to
	}
	if len(names) == 1 {
		return WriteSafetensors(filepath.Join(dir, names[0]), groups[0], meta)
	}
	wm := map[string]string{}
	var total int64
	for i, g := range groups {
		if err := WriteSafetensors(filepath.Join(dir, names[i]), g, meta); err != nil {
			return err
		}
		for _, t := range g {
			wm[t.Name] = names[i]
			total += dtypeSize[dtype] * int64(len(t.Data))
		}
	}
	idx, err := json.MarshalIndent(map[string]any{"metadata": map[string]any{"total_size": total}, "weight_map": wm}, "", "  ")
	if err != nil {
		return err
	}
	return writeFileSync(filepath.Join(dir, indexFile), idx)
}
