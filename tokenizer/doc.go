// Package tokenizer implements byte-pair encoding as Hugging Face's tokenizers library does, for
// agentrl's own models and for the pretrained models people bring: a deterministic trainer for
// byte-level BPE, the ChatML chat format with tool-call tokens, and reading and writing Hugging
// Face tokenizer.json and tokenizer_config.json.
//
// What it does:
//   - Load reads the tokenizer.json files of the two BPE families in use: byte-level BPE (GPT-2,
//     Llama 3.x, Qwen2/2.5/3, SmolLM2, DeepSeek) and SentencePiece-style BPE (Llama 2, Mistral,
//     TinyLlama, Gemma). Its pipeline is Hugging Face's: added tokens (special or not, with
//     lstrip, rstrip, single_word and normalized) are cut out of the raw text, the rest is
//     normalized (NFC, NFD, NFKC, NFKD, Lowercase, StripAccents, Strip, Prepend, Replace,
//     Sequence), normalized added tokens are cut out of that, the rest is pre-tokenized (Split with
//     a String or Regex pattern, every behavior and invert; ByteLevel with add_prefix_space and
//     use_regex; Digits; Metaspace with its prepend schemes and split; Sequence) and encoded by the
//     BPE model (merges in both JSON forms, ignore_merges, byte_fallback with <0xNN> tokens, unk
//     with fuse_unk). Decode runs the file's decoders (ByteLevel, Metaspace, ByteFallback, Fuse,
//     Strip, Replace, Sequence). Ids are identical to Hugging Face's: models_peer_test.go compares
//     six families' real files, and variants of them, with the Rust library and its JavaScript
//     port over a mixed corpus.
//   - A component or option it does not implement (Unigram, WordPiece, dropout, truncation,
//     padding, the BertNormalizer, Precompiled charsmaps, the Whitespace or Punctuation
//     pre-tokenizers, a pre-tokenizer after ByteLevel, …) is refused at load, by name, never
//     encoded approximately.
//   - The Split patterns of GPT-2, Llama 3 and Qwen are matched by hand-written scanners that
//     reproduce Oniguruma's backtracking for those exact patterns (Go's regexp has no look-ahead);
//     any other pattern is compiled with github.com/dlclark/regexp2/v2, a backtracking engine with
//     look-around and \p{…} classes, which agrees with Oniguruma on the tested patterns but is 2 to
//     4 times slower in encoding (BENCHMARKS.md). Unicode normalization is golang.org/x/text.
//   - Encode maps any Go string (valid UTF-8 or not) to token ids without the post-processor's
//     special tokens (Hugging Face's add_special_tokens=False); EncodeWith adds them on request
//     and refuses invalid UTF-8 with its byte offset. Decode maps ids back; byte-level and
//     byte-fallback tokenizers give the exact bytes that were encoded (Hugging Face substitutes
//     U+FFFD for invalid UTF-8), DecodeStrict and DecodeWith report an id outside the vocabulary
//     and DecodeWith can skip special tokens.
//   - TokenID, TokenString, SpecialTokens, BOS, EOS (from tokenizer_config.json) and VocabSize
//     are what callers of a foreign model need; SourceFiles keeps a loaded file set byte for byte,
//     and Save writes it back unchanged, so a checkpoint carries the files it was loaded with.
//   - Native tokenizers, those Train builds and the files Save writes for them (byte-level BPE,
//     the ByteLevel pre-tokenizer with an optional Digits step, no normalizer, the ChatML tokens),
//     encode as they always have and Save renders their files.
//   - Train learns merges from a corpus with incremental pair counts; ties are broken by the
//     smallest (left id, right id) pair, so a corpus and options always give the same tokenizer.
//   - EncodePrompt, EncodeObservation and EncodeFinal give the token pieces of a ChatML
//     conversation so the agent loop can append to a trajectory without re-tokenizing history;
//     the pieces concatenate to exactly what the saved Jinja chat template renders. They need the
//     added tokens <|im_start|> and <|im_end|> (ChatML reports whether they exist): without them
//     these methods and EncodeChat return nil and EndOfTurn returns -1, and a model's own chat
//     template is rendered elsewhere.
//
// What it does not do: Unigram or WordPiece models, BPE dropout, truncation and padding, offsets
// and alignments, pair sequences, the chat templates of tokenizer_config.json (it stores and
// writes them back), and transformers' clean_up_tokenization_spaces.
//
// A Tokenizer is immutable after construction and safe for concurrent use.
package tokenizer
