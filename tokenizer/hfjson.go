package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// File names inside a tokenizer directory, as Hugging Face names them.
const (
	TokenizerFile = "tokenizer.json"
	ConfigFile    = "tokenizer_config.json"
)

type hfAddedToken struct {
	ID         int32  `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

func (a addedToken) hf() hfAddedToken {
	return hfAddedToken{ID: a.id, Content: a.content, Normalized: a.normalized, Special: a.special}
}

// hfFile is tokenizer.json; field order is the order Hugging Face writes.
type hfFile struct {
	Version       string          `json:"version"`
	Truncation    json.RawMessage `json:"truncation"`
	Padding       json.RawMessage `json:"padding"`
	AddedTokens   []hfAddedToken  `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Decoder       json.RawMessage `json:"decoder"`
	Model         hfModel         `json:"model"`
}

type hfModel struct {
	Type                    string          `json:"type"`
	Dropout                 *float64        `json:"dropout"`
	UnkToken                *string         `json:"unk_token"`
	ContinuingSubwordPrefix *string         `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string         `json:"end_of_word_suffix"`
	FuseUnk                 bool            `json:"fuse_unk"`
	ByteFallback            bool            `json:"byte_fallback"`
	IgnoreMerges            bool            `json:"ignore_merges"`
	Vocab                   json.RawMessage `json:"vocab"`
	Merges                  json.RawMessage `json:"merges"`
}

// byteLevelDecoder is the decoder every byte-level tokenizer.json carries; its flags do not
// affect decoding.
const byteLevelDecoder = `{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true}`

// defaultPostProcessor only adjusts offsets, never ids (Qwen2 writes the same).
const defaultPostProcessor = `{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":false,"use_regex":false}`

// Save writes dir/tokenizer.json and dir/tokenizer_config.json, each atomically (a temporary file
// renamed into place), creating dir if needed. A native tokenizer's files are rendered; a loaded
// Hugging Face tokenizer's source files (SourceFiles) are copied byte for byte.
func (t *Tokenizer) Save(dir string) error {
	if !t.native {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("tokenizer: save: %w", err)
		}
		names := make([]string, 0, len(t.sources))
		for name := range t.sources {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			if err := writeFileAtomic(filepath.Join(dir, name), t.sources[name]); err != nil {
				return err
			}
		}
		return nil
	}
	tok, err := t.tokenizerJSON()
	if err != nil {
		return err
	}
	cfg, err := t.configJSON()
	if err != nil {
		return err
	}
	cfgData, err := marshalIndent(cfg)
	if err != nil {
		return fmt.Errorf("tokenizer: encoding %s: %w", ConfigFile, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("tokenizer: save: %w", err)
	}
	if err := writeFileAtomic(filepath.Join(dir, TokenizerFile), tok); err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(dir, ConfigFile), cfgData)
}

func (t *Tokenizer) tokenizerJSON() ([]byte, error) {
	f := hfFile{
		Version:       "1.0",
		PreTokenizer:  t.pre.json(),
		PostProcessor: t.postProcessor,
		Decoder:       json.RawMessage(byteLevelDecoder),
		Model:         hfModel{Type: "BPE", FuseUnk: t.fuseUnk, IgnoreMerges: t.ignoreMerges},
	}
	if f.PostProcessor == nil {
		f.PostProcessor = json.RawMessage(defaultPostProcessor)
	}
	if t.unkToken != "" {
		f.Model.UnkToken = &t.unkToken
	}
	for _, a := range t.added {
		f.AddedTokens = append(f.AddedTokens, a.hf())
	}
	// The vocabulary in id order, as Hugging Face writes it (a Go map would sort it by key).
	var vb bytes.Buffer
	vb.WriteByte('{')
	first := true
	for id, tok := range t.idToToken {
		if _, inModel := t.vocab[tok]; !inModel || t.vocab[tok] != int32(id) {
			continue
		}
		if !first {
			vb.WriteByte(',')
		}
		first = false
		k, err := marshalNoEscape(tok)
		if err != nil {
			return nil, fmt.Errorf("tokenizer: encoding vocabulary: %w", err)
		}
		vb.Write(k)
		vb.WriteByte(':')
		vb.WriteString(strconv.Itoa(id))
	}
	vb.WriteByte('}')
	f.Model.Vocab = vb.Bytes()
	merges, err := marshalNoEscape(t.mergeList)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: encoding merges: %w", err)
	}
	f.Model.Merges = merges
	if f.Model.Merges == nil || string(f.Model.Merges) == "null" {
		f.Model.Merges = json.RawMessage("[]")
	}
	data, err := marshalIndent(f)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: encoding %s: %w", TokenizerFile, err)
	}
	return data, nil
}

// json renders the pre-tokenizer in Hugging Face's form.
func (p preTokenizer) json() json.RawMessage {
	bl := fmt.Sprintf(`{"type":"ByteLevel","add_prefix_space":%t,"trim_offsets":%t,"use_regex":%t}`,
		p.addPrefixSpace, !p.keepOffsets, p.useRegex)
	if p.digits == digitsNone {
		return json.RawMessage(bl)
	}
	return json.RawMessage(fmt.Sprintf(`{"type":"Sequence","pretokenizers":[{"type":"Digits","individual_digits":%t},%s]}`,
		p.digits == digitsIndividual, bl))
}

func marshalNoEscape(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(b.Bytes(), "\n"), nil
}

func marshalIndent(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// writeFileAtomic writes data to a temporary file in path's directory, syncs it and renames it
// over path, so a reader sees the old file or the new one, never a torn one.
func writeFileAtomic(path string, data []byte) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("tokenizer: save %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if _, err = f.Write(data); err != nil {
		return fmt.Errorf("tokenizer: save %s: %w", path, err)
	}
	if err = f.Chmod(0o644); err != nil {
		return fmt.Errorf("tokenizer: save %s: %w", path, err)
	}
	if err = f.Sync(); err != nil {
		return fmt.Errorf("tokenizer: save %s: %w", path, err)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("tokenizer: save %s: %w", path, err)
	}
	if err = os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("tokenizer: save %s: %w", path, err)
	}
	return nil
}

// sourceFiles are the files of a tokenizer directory that Load keeps byte for byte, so that a
// checkpoint of a loaded model carries them unchanged.
var sourceFiles = []string{TokenizerFile, ConfigFile, "special_tokens_map.json", "chat_template.jinja", "chat_template.json"}

// Load reads dir/tokenizer.json and, if present, dir/tokenizer_config.json (without it the ChatML
// template is assumed for a native tokenizer). It accepts the byte-level BPE files Save writes and
// Hugging Face's BPE files of the byte-level and SentencePiece families, and rejects anything it
// would encode differently from Hugging Face, naming the component or field.
func Load(dir string) (*Tokenizer, error) {
	path := filepath.Join(dir, TokenizerFile)
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: load: %w", err)
	}
	cfgPath := filepath.Join(dir, ConfigFile)
	cfgData, err := os.ReadFile(cfgPath)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("tokenizer: load: %w", err)
	}
	t, err := fromBytes(data, cfgData, path, cfgPath)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", dir, err)
	}
	if !t.native {
		t.sources = map[string][]byte{}
		for _, name := range sourceFiles {
			b, err := os.ReadFile(filepath.Join(dir, name))
			switch {
			case err == nil:
				t.sources[name] = b
			case !errors.Is(err, os.ErrNotExist):
				return nil, fmt.Errorf("tokenizer: load: %w", err)
			}
		}
	}
	return t, nil
}

// fromBytes builds a tokenizer from the contents of tokenizer.json and tokenizer_config.json (nil
// when absent); the paths only name the files in errors.
func fromBytes(data, cfgData []byte, path, cfgPath string) (*Tokenizer, error) {
	spec, err := parseTokenizerJSON(data)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: load %s: %w", path, err)
	}
	spec.config = defaultChatConfig()
	if _, ok := spec.vocab[EndOfText]; !ok && !hasAdded(spec.added, EndOfText) {
		spec.config.pad = ""
	}
	if !hasAdded(spec.added, ImEnd) {
		spec.config.eos, spec.config.template = "", ""
	}
	if cfgData != nil {
		if spec.config, err = parseConfig(cfgData); err != nil {
			return nil, fmt.Errorf("tokenizer: load %s: %w", cfgPath, err)
		}
		if spec.config.template == "" && !spec.foreign {
			spec.config.template = chatMLTemplate
		}
	}
	return build(spec)
}

func hasAdded(added []addedToken, content string) bool {
	for _, a := range added {
		if a.content == content {
			return true
		}
	}
	return false
}

// parseTokenizerJSON checks every field that affects encoding and converts the file to a spec.
// A file within the native subset (what Save writes) is marked so; any other is run by the
// general pipeline, and a component or option that pipeline lacks is refused by name.
func parseTokenizerJSON(data []byte) (modelSpec, error) {
	var spec modelSpec
	// Each part of the file is scanned once: the top level into raw fields, the model likewise,
	// then the vocabulary and the merges (a Llama 3 file is 9 MB).
	top, err := objectOf(data, "top level", "version", "truncation", "padding", "added_tokens",
		"normalizer", "pre_tokenizer", "post_processor", "decoder", "model")
	if err != nil {
		return spec, err
	}
	f := hfFile{Truncation: top["truncation"], Padding: top["padding"], Normalizer: top["normalizer"],
		PreTokenizer: top["pre_tokenizer"], PostProcessor: top["post_processor"], Decoder: top["decoder"]}
	if v, ok := top["added_tokens"]; ok && !isNull(v) {
		if err := json.Unmarshal(v, &f.AddedTokens); err != nil {
			return spec, fmt.Errorf("added_tokens: %w", err)
		}
	}
	if v, ok := top["version"]; ok && !isNull(v) {
		if err := json.Unmarshal(v, &f.Version); err != nil {
			return spec, fmt.Errorf("version: %w", err)
		}
	}
	for _, nullField := range []struct {
		name string
		v    json.RawMessage
	}{{"truncation", f.Truncation}, {"padding", f.Padding}} {
		if !isNull(nullField.v) {
			return spec, fmt.Errorf("%s is set; only null is supported", nullField.name)
		}
	}
	if !isNull(f.Normalizer) {
		if spec.norm, err = parseNormalizer(f.Normalizer); err != nil {
			return spec, fmt.Errorf("normalizer: %w", err)
		}
	}
	if spec.steps, spec.byteLevel, err = parsePreSteps(f.PreTokenizer); err != nil {
		return spec, fmt.Errorf("pre_tokenizer: %w", err)
	}
	if spec.dec, spec.decodeTable, err = parseDecoderSteps(f.Decoder, 0); err != nil {
		return spec, fmt.Errorf("decoder: %w", err)
	}
	if !isNull(f.PostProcessor) {
		spec.postProcessor = f.PostProcessor
	}
	if err := parseModel(top["model"], &spec); err != nil {
		return spec, fmt.Errorf("model: %w", err)
	}
	if spec.byteFallback && spec.byteLevel {
		return spec, fmt.Errorf("model: byte_fallback with a ByteLevel pre-tokenizer is not supported")
	}
	spec.added, err = parseAdded(f.AddedTokens, spec.vocab)
	if err != nil {
		return spec, err
	}
	if spec.template, err = parsePostProcessor(f.PostProcessor, 0); err != nil {
		return spec, fmt.Errorf("post_processor: %w", err)
	}
	for _, ids := range [][]int32{spec.template.prefix, spec.template.suffix} {
		for _, id := range ids {
			if !idInSpec(spec, id) {
				return spec, fmt.Errorf("post_processor: special token id %d is not in the vocabulary", id)
			}
		}
	}
	spec.foreign = true
	if legacy, err := parsePreTokenizer(f.PreTokenizer); err == nil && spec.norm == nil && spec.decodeTable &&
		!spec.byteFallback && hasAdded(spec.added, ImStart) && hasAdded(spec.added, ImEnd) && !anyAddedFlags(spec.added) {
		spec.foreign = false
		spec.pre = legacy
	}
	return spec, nil
}

func idInSpec(spec modelSpec, id int32) bool {
	for _, v := range spec.vocab {
		if v == id {
			return true
		}
	}
	for _, a := range spec.added {
		if a.id == id {
			return true
		}
	}
	return false
}

func anyAddedFlags(added []addedToken) bool {
	for _, a := range added {
		if a.lstrip || a.rstrip || a.singleWord {
			return true
		}
	}
	return false
}

func isNull(v json.RawMessage) bool { return len(v) == 0 || string(bytes.TrimSpace(v)) == "null" }

// checkKeys rejects keys of a JSON object outside allowed, so that a feature this package does
// not implement is reported rather than silently ignored.
func checkKeys(obj json.RawMessage, where string, allowed ...string) error {
	_, err := objectOf(obj, where, allowed...)
	return err
}

// objectOf returns the fields of a JSON object, rejecting keys outside allowed.
func objectOf(obj json.RawMessage, where string, allowed ...string) (map[string]json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(obj, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	if m == nil {
		return nil, fmt.Errorf("%s: not an object", where)
	}
	for k := range m {
		found := false
		for _, a := range allowed {
			found = found || a == k
		}
		if !found {
			return nil, fmt.Errorf("%s: unsupported key %q", where, k)
		}
	}
	return m, nil
}

func typeOf(obj json.RawMessage) (string, error) {
	var head struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(obj, &head); err != nil {
		return "", err
	}
	return head.Type, nil
}

func parsePreTokenizer(raw json.RawMessage) (preTokenizer, error) {
	var p preTokenizer
	if isNull(raw) {
		return p, fmt.Errorf("missing; a byte-level BPE needs ByteLevel")
	}
	typ, err := typeOf(raw)
	if err != nil {
		return p, err
	}
	switch typ {
	case "ByteLevel":
		err = p.parseByteLevel(raw)
		return p, err
	case "Sequence":
		if err := checkKeys(raw, "Sequence", "type", "pretokenizers"); err != nil {
			return p, err
		}
		var seq struct {
			Pre []json.RawMessage `json:"pretokenizers"`
		}
		if err := json.Unmarshal(raw, &seq); err != nil {
			return p, err
		}
		if len(seq.Pre) == 1 {
			return parsePreTokenizer(seq.Pre[0])
		}
		if len(seq.Pre) != 2 {
			return p, fmt.Errorf("pre-tokenizer Sequence of %d pre-tokenizers; supported are [ByteLevel] and [Digits, ByteLevel]", len(seq.Pre))
		}
		if t0, _ := typeOf(seq.Pre[0]); t0 != "Digits" {
			return p, fmt.Errorf("pre-tokenizer Sequence starts with %q; supported are [ByteLevel] and [Digits, ByteLevel]", t0)
		}
		if err := checkKeys(seq.Pre[0], "Digits", "type", "individual_digits"); err != nil {
			return p, err
		}
		var d struct {
			Individual bool `json:"individual_digits"`
		}
		if err := json.Unmarshal(seq.Pre[0], &d); err != nil {
			return p, err
		}
		p.digits = digitsContiguous
		if d.Individual {
			p.digits = digitsIndividual
		}
		if t1, _ := typeOf(seq.Pre[1]); t1 != "ByteLevel" {
			return p, fmt.Errorf("pre-tokenizer Sequence continues with %q; supported are [ByteLevel] and [Digits, ByteLevel]", t1)
		}
		err = p.parseByteLevel(seq.Pre[1])
		return p, err
	}
	return p, fmt.Errorf("type %q is not supported (ByteLevel, or a Sequence of Digits and ByteLevel)", typ)
}

func (p *preTokenizer) parseByteLevel(raw json.RawMessage) error {
	if err := checkKeys(raw, "ByteLevel", "type", "add_prefix_space", "trim_offsets", "use_regex"); err != nil {
		return err
	}
	bl := struct {
		AddPrefixSpace bool  `json:"add_prefix_space"`
		TrimOffsets    *bool `json:"trim_offsets"`
		UseRegex       *bool `json:"use_regex"`
	}{}
	if err := json.Unmarshal(raw, &bl); err != nil {
		return err
	}
	p.addPrefixSpace = bl.AddPrefixSpace
	p.useRegex = bl.UseRegex == nil || *bl.UseRegex // Hugging Face's default is true
	p.keepOffsets = bl.TrimOffsets != nil && !*bl.TrimOffsets
	return nil
}

func parseModel(raw json.RawMessage, spec *modelSpec) error {
	if isNull(raw) {
		return fmt.Errorf("missing")
	}
	mm, err := objectOf(raw, "model", "type", "dropout", "unk_token", "continuing_subword_prefix",
		"end_of_word_suffix", "fuse_unk", "byte_fallback", "ignore_merges", "vocab", "merges")
	if err != nil {
		return err
	}
	var m hfModel
	for key, dst := range map[string]any{"type": &m.Type, "dropout": &m.Dropout, "unk_token": &m.UnkToken,
		"continuing_subword_prefix": &m.ContinuingSubwordPrefix, "end_of_word_suffix": &m.EndOfWordSuffix,
		"fuse_unk": &m.FuseUnk, "byte_fallback": &m.ByteFallback, "ignore_merges": &m.IgnoreMerges} {
		if v, ok := mm[key]; ok {
			if err := json.Unmarshal(v, dst); err != nil {
				return fmt.Errorf("%s: %w", key, err)
			}
		}
	}
	m.Vocab, m.Merges = mm["vocab"], mm["merges"]
	if _, ok := mm["type"]; !ok && m.Merges != nil {
		m.Type = "BPE" // older files leave the type out; Hugging Face recognises BPE by its merges
	}
	switch {
	case m.Type != "BPE":
		return fmt.Errorf("type %q is not supported (BPE)", m.Type)
	case m.Dropout != nil && *m.Dropout != 0:
		return fmt.Errorf("dropout %g is not supported (it makes encoding random)", *m.Dropout)
	case m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "":
		return fmt.Errorf("continuing_subword_prefix %q is not supported", *m.ContinuingSubwordPrefix)
	case m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "":
		return fmt.Errorf("end_of_word_suffix %q is not supported", *m.EndOfWordSuffix)
	}
	if err := json.Unmarshal(m.Vocab, &spec.vocab); err != nil {
		return fmt.Errorf("vocab: %w", err)
	}
	merges, err := parseMerges(m.Merges)
	if err != nil {
		return fmt.Errorf("merges: %w", err)
	}
	spec.merges = merges
	if m.UnkToken != nil {
		spec.unkToken = *m.UnkToken
	}
	spec.fuseUnk = m.FuseUnk
	spec.ignoreMerges = m.IgnoreMerges
	spec.byteFallback = m.ByteFallback
	return nil
}

// parseMerges accepts both forms Hugging Face writes: pairs (["a", "b"]) and, in older files,
// strings "a b".
func parseMerges(raw json.RawMessage) ([][2]string, error) {
	if isNull(raw) {
		return nil, nil
	}
	var pairs [][2]string
	// The first element says which form the list is in, so the list is decoded once.
	body := bytes.TrimSpace(raw)
	if len(body) > 0 && body[0] == '[' {
		body = bytes.TrimSpace(body[1:])
	}
	if len(body) == 0 || body[0] != '"' {
		if err := json.Unmarshal(raw, &pairs); err != nil {
			return nil, fmt.Errorf("neither a list of pairs nor a list of strings: %w", err)
		}
		return pairs, nil
	}
	var lines []string
	if err := json.Unmarshal(raw, &lines); err != nil {
		return nil, fmt.Errorf("neither a list of pairs nor a list of strings")
	}
	pairs = make([][2]string, len(lines))
	for i, l := range lines {
		parts := strings.Split(l, " ")
		if len(parts) != 2 {
			return nil, fmt.Errorf("merge %d %q is not two tokens separated by one space", i, l)
		}
		pairs[i] = [2]string{parts[0], parts[1]}
	}
	return pairs, nil
}

// parseAdded converts added_tokens and checks each id is the one Hugging Face assigns when it
// loads the file (it recomputes ids rather than reading them: a token in the model vocabulary
// keeps its id, any other gets the next id after the vocabulary and earlier added tokens).
func parseAdded(list []hfAddedToken, vocab map[string]int32) ([]addedToken, error) {
	out := make([]addedToken, 0, len(list))
	maxAdded := int32(-1)
	for _, a := range list {
		if a.Content == "" {
			return nil, fmt.Errorf("added token with id %d has empty content", a.ID)
		}
		want, inVocab := vocab[a.Content]
		if !inVocab {
			want = int32(len(vocab))
			if maxAdded >= want {
				want = maxAdded + 1
			}
		}
		if a.ID != want {
			return nil, fmt.Errorf("added token %q has id %d, but Hugging Face would give it id %d", a.Content, a.ID, want)
		}
		maxAdded = max(maxAdded, want)
		out = append(out, addedToken{id: a.ID, content: a.Content, special: a.Special, normalized: a.Normalized,
			singleWord: a.SingleWord, lstrip: a.LStrip, rstrip: a.RStrip})
	}
	return out, nil
}
