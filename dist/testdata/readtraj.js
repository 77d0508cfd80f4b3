// Reads one trajectory message from an agentrl trajectory stream with the official NATS client
// for Node and prints what it found as JSON: the headers, the payload (base64) and the first
// fields of the traj binary codec decoded here, independently of the Go code.
// Usage: node readtraj.js <nats url> <token> <stream> <seq>   (NATS_MODULE = path of the package)
const { connect } = require(process.env.NATS_MODULE || "nats");

function reader(b) {
  let off = 0;
  const uvarint = () => {
    let x = 0n, s = 0n;
    for (;;) {
      const c = b[off++];
      if (c === undefined) throw new Error("truncated varint");
      x |= BigInt(c & 0x7f) << s;
      if (c < 0x80) return x;
      s += 7n;
    }
  };
  const varint = () => {
    const u = uvarint();
    return (u & 1n) ? -((u >> 1n) + 1n) : (u >> 1n);
  };
  const str = () => {
    const n = Number(uvarint());
    const s = new TextDecoder("utf-8", { fatal: true }).decode(b.subarray(off, off + n));
    off += n;
    return s;
  };
  const bytes = (n) => { const s = b.subarray(off, off + n); off += n; return s; };
  return { uvarint, varint, str, bytes };
}

(async () => {
  const [url, token, stream, seq] = process.argv.slice(2);
  const nc = await connect({ servers: url, token });
  const jsm = await nc.jetstreamManager();
  const m = await jsm.streams.getMessage(stream, { seq: Number(seq) });
  const headers = {};
  for (const k of m.header.keys()) headers[k] = m.header.get(k);
  const r = reader(m.data);
  const magic = new TextDecoder().decode(r.bytes(4));
  const version = r.bytes(1)[0];
  const id = r.str();
  const env = r.str();
  const taskSeed = r.varint().toString();
  const groupId = r.uvarint().toString();
  const tokens = Number(r.uvarint());
  const first = [];
  for (let i = 0; i < Math.min(tokens, 8); i++) first.push(Number(BigInt.asIntN(32, r.uvarint()))); // uint32(id) on the wire
  console.log(JSON.stringify({
    subject: m.subject, seq: m.seq, headers,
    payload: Buffer.from(m.data).toString("base64"),
    decoded: { magic, version, id, env, task_seed: taskSeed, group_id: groupId, tokens, first_tokens: first },
  }));
  await nc.close();
})().catch((e) => { console.error(e); process.exit(1); });
