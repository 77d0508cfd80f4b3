// Peer for models_peer_test.go: encodes and decodes texts with the real tokenizer.json files of
// model families, using Hugging Face's Rust library (npm "tokenizers") and its JavaScript
// implementation (npm "@huggingface/tokenizers"), and times the Rust library's encode.
//
// usage: node hfmodels.js <node_modules dir> <job.json> <result.json>
//
// job (compare): {mode: "compare", families: [{name, dir, rustOnly}], texts: [...], special: [indices]}
// result: {name: {rust: {ids, decoded, skipped, special}, js: {...}}}
//   ids[i]: encode(texts[i]) without special tokens; decoded[i]: decode(ids[i]);
//   skipped[i]: decode(ids[i], skip_special_tokens); special[k]: encode(texts[special[k]]) with
//   special tokens.
//
// job (bench): {mode: "bench", families: [{name, dir}], texts: [...], seconds: s}
// result: {name: {bytes, tokens, seconds, cpuSeconds, reps}}: the Rust library encoding all texts,
// one call per text, awaited one at a time, repeated for at least `seconds` of wall time;
// cpuSeconds is the process's user and system CPU time over the same loop.
'use strict';
const fs = require('fs');
const path = require('path');
const modules = process.argv[2];
const job = JSON.parse(fs.readFileSync(process.argv[3], 'utf8'));
const rust = require(path.join(modules, 'tokenizers'));
const js = require(path.join(modules, '@huggingface', 'tokenizers'));

async function compareRust(dir, texts, special) {
  const tok = rust.Tokenizer.fromFile(path.join(dir, 'tokenizer.json'));
  const out = { ids: [], decoded: [], skipped: [], special: [] };
  for (const t of texts) {
    const e = await tok.encode(t, null, { addSpecialTokens: false });
    const ids = Array.from(e.getIds());
    out.ids.push(ids);
    out.decoded.push(await tok.decode(ids, false));
    out.skipped.push(await tok.decode(ids, true));
  }
  for (const k of special) {
    const e = await tok.encode(texts[k], null, { addSpecialTokens: true });
    out.special.push(Array.from(e.getIds()));
  }
  return out;
}

function compareJS(dir, texts, special) {
  const tj = JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer.json'), 'utf8'));
  const cfgPath = path.join(dir, 'tokenizer_config.json');
  const cfg = fs.existsSync(cfgPath) ? JSON.parse(fs.readFileSync(cfgPath, 'utf8')) : {};
  const tok = new js.Tokenizer(tj, cfg);
  const out = { ids: [], decoded: [], skipped: [], special: [] };
  const opts = { clean_up_tokenization_spaces: false };
  for (const t of texts) {
    const ids = Array.from(tok.encode(t, { add_special_tokens: false }).ids);
    out.ids.push(ids);
    // The JavaScript decode refuses an empty list; the empty text decodes to "".
    out.decoded.push(ids.length ? tok.decode(ids, { ...opts, skip_special_tokens: false }) : '');
    out.skipped.push(ids.length ? tok.decode(ids, { ...opts, skip_special_tokens: true }) : '');
  }
  for (const k of special) {
    out.special.push(Array.from(tok.encode(texts[k], { add_special_tokens: true }).ids));
  }
  return out;
}

async function bench(dir, texts, seconds) {
  const tok = rust.Tokenizer.fromFile(path.join(dir, 'tokenizer.json'));
  let bytes = 0;
  for (const t of texts) bytes += Buffer.byteLength(t, 'utf8');
  let tokens = 0;
  for (const t of texts) tokens += (await tok.encode(t, null, { addSpecialTokens: false })).getIds().length; // warm-up
  let reps = 0;
  const cpu0 = process.cpuUsage();
  const start = process.hrtime.bigint();
  let elapsed = 0;
  while (reps === 0 || elapsed < seconds) {
    for (const t of texts) await tok.encode(t, null, { addSpecialTokens: false });
    reps++;
    elapsed = Number(process.hrtime.bigint() - start) / 1e9;
  }
  const cpu = process.cpuUsage(cpu0);
  return { bytes, tokens, seconds: elapsed, cpuSeconds: (cpu.user + cpu.system) / 1e6, reps };
}

(async () => {
  const result = {};
  for (const f of job.families) {
    if (job.mode === 'bench') {
      result[f.name] = await bench(f.dir, job.texts, job.seconds);
    } else {
      result[f.name] = {
        rust: await compareRust(f.dir, job.texts, job.special),
        js: f.rustOnly ? null : compareJS(f.dir, job.texts, job.special),
      };
    }
  }
  fs.writeFileSync(process.argv[4], JSON.stringify(result));
})().catch((e) => { console.error(e); process.exit(1); });
