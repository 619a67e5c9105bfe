// Reading partition streams back for the producer's order tests, with the official JetStream
// client (@nats-io/jetstream direct batch gets), independent of the SDK under test.

/** Every message of a stream in stream order: [{seq, headers (MsgHdrs), data}]. */
export async function readStream(jsm, stream) {
  const info = await jsm.streams.info(stream);
  const last = info.state.last_seq;
  const out = [];
  let seq = 1;
  while (seq <= last) {
    const it = await jsm.direct.getBatch(stream, { seq, batch: 1000 });
    let n = 0;
    for await (const m of it) {
      out.push({ seq: m.seq, subject: m.subject, headers: m.header, data: m.data });
      seq = m.seq + 1;
      n++;
    }
    if (n === 0) break;
  }
  return out;
}

/**
 * Checks the stored records of producer `id` in every partition stream: per key, Pctl-Seq
 * strictly ascending in stream order, no record stored twice, every acknowledged pseq stored.
 * Returns {violations: [...], missing: [...], stored: Map pseq -> {partition, epoch}}.
 */
export async function checkStored(jsm, topic, partitions, id, acked) {
  const stored = new Map();
  const violations = [];
  const dup = [];
  for (let q = 0; q < partitions; q++) {
    const lastByKey = new Map();
    for (const m of await readStream(jsm, `PCTL_${topic}_${q}`)) {
      if (m.headers?.get('Pctl-Producer') !== id) continue;
      const pseq = Number(m.headers.get('Pctl-Seq'));
      const key = m.headers.get('Pctl-Key');
      const epoch = Number(m.subject.split('.')[3]);
      if (stored.has(pseq)) dup.push(pseq);
      stored.set(pseq, { partition: q, epoch, key });
      const prev = lastByKey.get(key) ?? 0;
      if (pseq <= prev) violations.push(`partition ${q} seq ${m.seq}: key ${key} record ${pseq} stored after record ${prev}`);
      lastByKey.set(key, Math.max(prev, pseq));
    }
  }
  const missing = acked.filter((pseq) => !stored.has(pseq));
  return { violations, missing, dup, stored };
}
