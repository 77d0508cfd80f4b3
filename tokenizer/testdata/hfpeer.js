// Peer for peer_test.go: runs the official Hugging Face tokenizers (npm bindings) on files written
// by the Go package, and builds tokenizer.json files with Hugging Face for the Go package to load.
//
// usage: node hfpeer.js <tokenizers module dir> <job.json> <result.json>
//
// job: {ours: dir, texts: [...], corpus: [...], vocabSize: n, specials: [[content, special]...],
//       variantsDir: dir}
// result: {ours: {ids, decoded}, merges: [[a, b]...], variants: {name: {dir, ids}}}
//
// The BPE trainer below is a deliberately naive, independent implementation (recount every pair
// every round) of the rule documented in train.go, over Hugging Face's own pre-tokenizer output;
// the Go test compares its merges with Train's.
'use strict';
const fs = require('fs');
const path = require('path');
const hf = require(process.argv[2]);
const job = JSON.parse(fs.readFileSync(process.argv[3], 'utf8'));

function bytesToUnicode() {
  const bs = [];
  for (let b = 0; b < 256; b++) {
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255)) bs.push(b);
  }
  const cs = bs.slice();
  let n = 0;
  for (let b = 0; b < 256; b++) {
    if (!bs.includes(b)) { bs.push(b); cs.push(256 + n); n++; }
  }
  const m = new Array(256);
  bs.forEach((b, i) => { m[b] = String.fromCodePoint(cs[i]); });
  return m;
}

function escapeRe(s) { return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'); }

async function encodeAll(tok, texts) {
  const ids = [];
  const decoded = [];
  for (const t of texts) {
    const e = await tok.encode(t, null, { addSpecialTokens: false });
    const i = Array.from(e.getIds());
    ids.push(i);
    decoded.push(await tok.decode(i, false));
  }
  return { ids, decoded };
}

function trainNaive(corpus, specials, vocabSize, preTok) {
  const split = new RegExp(specials.map(s => escapeRe(s[0])).join('|'), 'g');
  const counts = new Map();
  for (const doc of corpus) {
    for (const piece of doc.split(split)) {
      if (piece.length === 0) continue;
      for (const [w] of preTok.preTokenizeString(piece)) counts.set(w, (counts.get(w) || 0) + 1);
    }
  }
  const tokens = specials.map(s => s[0]);
  const b2u = bytesToUnicode();
  for (let b = 0; b < 256; b++) tokens.push(b2u[b]);
  const ids = new Map(tokens.map((t, i) => [t, i]));
  const words = [];
  for (const [w, f] of counts) words.push({ sym: Array.from(w).map(c => ids.get(c)), f });
  const merges = [];
  while (tokens.length < vocabSize) {
    const pc = new Map();
    for (const w of words) {
      for (let i = 0; i + 1 < w.sym.length; i++) {
        const k = w.sym[i] * 16777216 + w.sym[i + 1];
        pc.set(k, (pc.get(k) || 0) + w.f);
      }
    }
    let best = -1, bestCount = 0;
    for (const [k, c] of pc) {
      if (c > bestCount || (c === bestCount && k < best)) { best = k; bestCount = c; }
    }
    if (best < 0 || bestCount < 2) break;
    const a = Math.floor(best / 16777216), b = best % 16777216;
    const s = tokens[a] + tokens[b];
    let id = ids.get(s);
    if (id === undefined) { id = tokens.length; tokens.push(s); ids.set(s, id); }
    merges.push([tokens[a], tokens[b]]);
    for (const w of words) {
      const out = [];
      for (let i = 0; i < w.sym.length;) {
        if (i + 1 < w.sym.length && w.sym[i] === a && w.sym[i + 1] === b) { out.push(id); i += 2; }
        else { out.push(w.sym[i]); i++; }
      }
      w.sym = out;
    }
  }
  const vocab = {};
  tokens.forEach((t, i) => { vocab[t] = i; });
  return { vocab, merges };
}

const byteLevelDecoder = { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true };

// writeVariant lets Hugging Face load a patched file and save it again, so the file the Go side
// reads is one Hugging Face wrote (unless keepRaw, used for the old string merges format).
function writeVariant(name, base, patch, keepRaw) {
  const dir = path.join(job.variantsDir, name);
  fs.mkdirSync(dir, { recursive: true });
  const j = JSON.parse(JSON.stringify(base));
  patch(j);
  const file = path.join(dir, 'tokenizer.json');
  fs.writeFileSync(file, JSON.stringify(j, null, 2));
  const tok = hf.Tokenizer.fromFile(file);
  if (!keepRaw) tok.save(file, true);
  return { dir, tok: hf.Tokenizer.fromFile(file) };
}

(async () => {
  const result = { variants: {} };
  const ours = hf.Tokenizer.fromFile(path.join(job.ours, 'tokenizer.json'));
  result.ours = await encodeAll(ours, job.texts);

  const preTok = hf.sequencePreTokenizer([hf.digitsPreTokenizer(true), hf.byteLevelPreTokenizer(false, true)]);
  const { vocab, merges } = trainNaive(job.corpus, job.specials, job.vocabSize, preTok);
  result.merges = merges;

  const tok = new hf.Tokenizer(hf.BPE.init(vocab, merges, {}));
  tok.setPreTokenizer(preTok);
  tok.addAddedTokens(job.specials.map(([c, special]) =>
    new hf.AddedToken(c, special, { normalized: false })));
  fs.mkdirSync(job.variantsDir, { recursive: true });
  const baseFile = path.join(job.variantsDir, 'base.json');
  tok.save(baseFile, true);
  const base = JSON.parse(fs.readFileSync(baseFile, 'utf8'));
  base.decoder = byteLevelDecoder;

  const variants = {
    digits_individual: [j => {}, false],
    bytelevel_only: [j => { j.pre_tokenizer = j.pre_tokenizer.pretokenizers[1]; }, false],
    digits_contiguous: [j => { j.pre_tokenizer.pretokenizers[0].individual_digits = false; }, false],
    prefix_space: [j => {
      j.pre_tokenizer = j.pre_tokenizer.pretokenizers[1];
      j.pre_tokenizer.add_prefix_space = true;
    }, false],
    no_regex: [j => { j.pre_tokenizer.pretokenizers[1].use_regex = false; }, false],
    string_merges: [j => { j.model.merges = j.model.merges.map(m => m.join(' ')); }, true],
    ignore_merges: [j => { j.model.ignore_merges = true; }, false],
    normalized_added: [j => {
      // A non-special added token matched after the others, overlapping a special one.
      j.added_tokens.push({ id: Object.keys(j.model.vocab).length, content: 'call>', single_word: false,
        lstrip: false, rstrip: false, normalized: true, special: false });
      j.added_tokens.push({ id: Object.keys(j.model.vocab).length + 1, content: 'answer', single_word: false,
        lstrip: false, rstrip: false, normalized: true, special: false });
    }, false],
    unk_missing_bytes: [j => {
      // Drop a few byte tokens (and merges using them): Hugging Face then maps them to unk.
      const drop = new Set(['Ã', 'Ġ', 'é']);
      for (const d of drop) delete j.model.vocab[d];
      j.model.merges = j.model.merges.filter(m => !drop.has(m[0]) && !drop.has(m[1]) &&
        !Array.from(m[0] + m[1]).some(c => drop.has(c)));
      const keep = new Set(j.model.merges.map(m => m[0] + m[1]));
      for (const k of Object.keys(j.model.vocab)) {
        if (Array.from(k).some(c => drop.has(c)) && !keep.has(k)) delete j.model.vocab[k];
      }
      // Renumber densely so Hugging Face keeps the ids of the added tokens.
      const toks = Object.entries(j.model.vocab).sort((a, b) => a[1] - b[1]).map(e => e[0]);
      j.model.vocab = {};
      toks.forEach((t, i) => { j.model.vocab[t] = i; });
      j.model.unk_token = '<|endoftext|>';
      j.model.fuse_unk = true;
    }, false],
  };
  for (const [name, [patch, keepRaw]] of Object.entries(variants)) {
    const v = writeVariant(name, base, patch, keepRaw);
    result.variants[name] = { dir: v.dir, ...(await encodeAll(v.tok, job.texts)) };
  }
  fs.writeFileSync(process.argv[4], JSON.stringify(result));
})().catch(e => { console.error(e); process.exit(1); });
