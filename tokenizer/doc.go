// Package tokenizer implements byte-level byte-pair encoding (the GPT-2 scheme), a deterministic
// trainer for it, the ChatML chat format with tool-call tokens, and reading and writing Hugging Face
// tokenizer.json and tokenizer_config.json.
//
// What it does:
//   - Encode maps any Go string (valid UTF-8 or not) to token ids, and Decode maps them back to the
//     exact same bytes. Added tokens (the chat and tool-call specials) written inside the text are
//     recognised and become their ids, as Hugging Face tokenizers does with add_special_tokens=false.
//   - Pre-tokenization reproduces Hugging Face's ByteLevel pre-tokenizer (the GPT-2 regular
//     expression, matched by a hand-written scanner because Go's regexp has no lookahead), optionally
//     preceded by the Digits pre-tokenizer, which splits every digit into its own word.
//   - Train learns merges from a corpus with incremental pair counts; ties are broken by the smallest
//     (left id, right id) pair, so a corpus and options always give the same tokenizer.
//   - Save and Load speak Hugging Face's format; compatibility is tested against the official npm
//     bindings (see peer_test.go).
//   - EncodePrompt, EncodeObservation and EncodeFinal give the token pieces of a ChatML conversation
//     so the agent loop can append to a trajectory without re-tokenizing history; the pieces
//     concatenate to exactly what the saved Jinja chat template renders.
//
// What it does not do: normalizers, Unigram or WordPiece models, BPE dropout, byte fallback, the
// Split (regex) pre-tokenizer used by newer models, truncation and padding. Load rejects files that
// use them, naming the feature, instead of encoding differently from Hugging Face.
//
// A Tokenizer is immutable after construction and safe for concurrent use.
package tokenizer
