import * as assert from "node:assert/strict";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { after, afterEach, describe, test } from "node:test";
import { NagareClient as Client, type ClientOptions } from "../src/client";
import { refusedPort, TestServer as Server, type ServerOptions } from "./server";

// Every client and server a test makes is closed after it, pass or fail.
const open: { clients: Client[]; servers: Server[] } = { clients: [], servers: [] };
class NagareClient extends Client {
  constructor(o: ClientOptions) {
    super(o);
    open.clients.push(this);
  }
}
const TestServer = {
  async start(o: ServerOptions = {}): Promise<Server> {
    const s = await Server.start(o);
    open.servers.push(s);
    return s;
  },
};
type TestServer = Server;
afterEach(async () => {
  for (const c of open.clients.splice(0)) await c.close(0);
  for (const s of open.servers.splice(0)) await s.stop();
});

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "nagare-ts-test-"));
after(() => fs.rmSync(tmp, { recursive: true, force: true }));

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const seqs = (s: TestServer, tag?: string) =>
  s.events.filter((e) => tag === undefined || e.tag === tag).map((e) => e.record.seq as number);
/** Waits (with a deadline) until cond() holds. */
async function until(what: string, cond: () => boolean, ms = 5000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > deadline) assert.fail(`${what}: not within ${ms} ms`);
    await sleep(10);
  }
}
const range = (a: number, b: number) => Array.from({ length: b - a }, (_, i) => a + i);

function collectErrors(): { errors: Error[]; onError: (e: Error) => void } {
  const errors: Error[] = [];
  return { errors, onError: (e) => errors.push(e) };
}

describe("client", () => {
  test("batches events into one PackedForward frame per tag", async () => {
    const server = await TestServer.start();
    const client = new NagareClient({ port: server.port });
    for (let i = 0; i < 10; i++) {
      client.emit("app.a", { seq: i, msg: "hello" });
      client.emit("app.b", { seq: i });
    }
    assert.equal(await client.flush(5000), true);
    await server.waitForEvents(20);
    assert.equal(server.frames.length, 2);
    for (const r of server.frames) {
      assert.equal(r.frame.mode, "packed");
      assert.equal(r.frame.options.size, 10);
      assert.equal(r.frame.entries.length, 10);
    }
    assert.deepEqual(seqs(server, "app.a"), range(0, 10));
    assert.deepEqual(seqs(server, "app.b"), range(0, 10));
    const t = server.frames[0]?.frame.entries[0]?.time;
    assert.ok(t && Math.abs(t.sec - Date.now() / 1000) < 5, "event time is now");
    assert.deepEqual(client.stats().sent, 20);
    assert.equal(await client.close(1000), true);
    await server.stop();
  });

  test("explicit times and tag prefix", async () => {
    const server = await TestServer.start();
    const client = new NagareClient({ port: server.port, tagPrefix: "svc", compress: true });
    client.emit("x", { a: 1 }, new Date(1_700_000_000_123));
    client.emit("x", { a: 2 }, 1_700_000_000_456);
    client.emit("x", { a: 3 }, 1_700_000_000_000_000_789n);
    assert.equal(await client.close(5000), true);
    await server.waitForEvents(3);
    const f = server.frames[0]?.frame;
    assert.equal(f?.tag, "svc.x");
    assert.equal(f?.mode, "compressed");
    assert.deepEqual(
      f?.entries.map((e) => [e.time.sec, e.time.nsec]),
      [
        [1_700_000_000, 123_000_000],
        [1_700_000_000, 456_000_000],
        [1_700_000_000, 789],
      ],
    );
    await server.stop();
  });

  test("nothing lost across a server restart", async () => {
    const server = await TestServer.start();
    const { errors, onError } = collectErrors();
    const client = new NagareClient({ port: server.port, backoffBaseMs: 20, backoffMaxMs: 200, onError });
    for (let i = 0; i < 50; i++) client.emit("restart", { seq: i });
    assert.equal(await client.flush(5000), true);
    await server.stop();
    await sleep(50);
    for (let i = 50; i < 100; i++) client.emit("restart", { seq: i });
    await sleep(300);
    assert.equal(client.stats().buffered, 50, "events are retained while the server is down");
    await server.listen();
    for (let i = 100; i < 150; i++) client.emit("restart", { seq: i });
    assert.equal(await client.flush(10_000), true);
    await server.waitForEvents(150);
    assert.deepEqual(seqs(server), range(0, 150));
    const st = client.stats();
    assert.equal(st.sent, 150);
    assert.equal(st.dropped, 0);
    assert.ok(st.reconnects >= 1, "reconnected");
    assert.ok(errors.length > 0, "connection errors were reported");
    await client.close(1000);
    await server.stop();
  });

  test("a connection the server closed is noticed before the next write", async () => {
    const server = await TestServer.start();
    const client = new NagareClient({ port: server.port, backoffBaseMs: 20 });
    for (let round = 0; round < 5; round++) {
      for (let i = 0; i < 10; i++) client.emit("fin", { seq: round * 10 + i });
      assert.equal(await client.flush(5000), true);
      await server.waitForEvents((round + 1) * 10);
      server.dropConnections(); // close(): FIN now, RST for anything written later
      await sleep(20);
    }
    assert.deepEqual(seqs(server), range(0, 50));
    assert.equal(server.connections.length, 5, "one new connection per round");
    assert.equal(client.stats().reconnects, 4);
    assert.equal(client.stats().retried, 0, "nothing was written into a closed connection");
  });

  test("ack mode: nothing lost when connections drop", async () => {
    const server = await TestServer.start();
    const client = new NagareClient({ port: server.port, requireAck: true, backoffBaseMs: 20, ackTimeoutMs: 2000 });
    for (let i = 0; i < 30; i++) client.emit("ackdrop", { seq: i });
    assert.equal(await client.flush(5000), true);
    server.dropConnections();
    await sleep(30);
    for (let i = 30; i < 60; i++) client.emit("ackdrop", { seq: i });
    assert.equal(await client.flush(5000), true);
    assert.deepEqual([...new Set(seqs(server))], range(0, 60));
    assert.equal(client.stats().sent, 60);
    await client.close(1000);
    await server.stop();
  });

  test("reconnect backoff intervals grow", async () => {
    const port = await refusedPort();
    const stamps: number[] = [];
    const client = new NagareClient({
      port,
      backoffBaseMs: 40,
      backoffMaxMs: 10_000,
      onError: (e) => {
        if (/connect to/.test(e.message)) stamps.push(performance.now());
      },
    });
    client.emit("backoff", { seq: 0 });
    const deadline = Date.now() + 8000;
    while (stamps.length < 6 && Date.now() < deadline) await sleep(10);
    await client.close(0);
    assert.ok(stamps.length >= 6, `got ${stamps.length} attempts`);
    const gaps = stamps.slice(1).map((t, i) => t - (stamps[i] as number));
    // The delay before attempt i+1 is jittered in [d/2, d] with d = 40 ms * 2^i:
    // timers never fire early, so each gap is at least 20 ms * 2^i (1 ms slack
    // for timer rounding), whatever the load on the machine.
    for (let i = 0; i < 5; i++) {
      const min = 20 * 2 ** i - 1;
      assert.ok((gaps[i] as number) >= min, `gap ${i} >= ${min} ms: ${gaps.map(Math.round)}`);
    }
    assert.equal(client.stats().dropped, 1, "close(0) with the server down drops (no spill path set)");
  });

  test("spills to disk when the memory buffer is full and drains in order", async () => {
    const server = await TestServer.start();
    await server.stop(); // keep the port, nothing listens
    const spillPath = path.join(tmp, "spill-order.bin");
    const client = new NagareClient({
      port: server.port,
      bufferLimit: 2000,
      overflow: "spill",
      spillPath,
      backoffBaseMs: 20,
      backoffMaxMs: 100,
    });
    for (let i = 0; i < 500; i++) assert.equal(client.emit("spill", { seq: i, pad: "x".repeat(20) }), true);
    // counted as spilled once fsync'd, within SPILL_SYNC_MS
    await until("spilled, fsync'd", () => client.stats().spilled > 400);
    const st = client.stats();
    assert.ok(st.bufferedBytes <= 2000);
    assert.equal(st.spillPending + st.buffered, 500);
    assert.ok(fs.statSync(spillPath).size > 10_000);
    await server.listen();
    assert.equal(await client.flush(10_000), true);
    await server.waitForEvents(500);
    assert.deepEqual(seqs(server), range(0, 500));
    assert.equal(client.stats().dropped, 0);
    assert.equal(fs.statSync(spillPath).size, 0, "spill file emptied");
    await client.close(1000);
    await server.stop();
  });

  test("spill file size limit: past it events are dropped and counted", async () => {
    const port = await refusedPort();
    const client = new NagareClient({
      port,
      bufferLimit: 1000,
      spillPath: path.join(tmp, "spill-limit.bin"),
      spillLimit: 3000,
      backoffBaseMs: 1000,
    });
    for (let i = 0; i < 200; i++) client.emit("limit", { seq: i, pad: "y".repeat(20) });
    assert.ok(client.stats().dropped > 0);
    await until("spill file fsync'd", () => {
      const st = client.stats();
      return st.buffered + st.spillPending + st.dropped === 200;
    });
    await client.close(0);
  });

  test("undelivered events are kept in the spill file on close and sent by the next client", async () => {
    const server = await TestServer.start();
    await server.stop();
    const spillPath = path.join(tmp, "spill-close.bin");
    const a = new NagareClient({ port: server.port, spillPath, backoffBaseMs: 1000 });
    for (let i = 0; i < 20; i++) a.emit("persist", { seq: i });
    assert.equal(await a.close(100), false);
    assert.equal(a.stats().dropped, 0);
    assert.equal(a.stats().spillPending, 20);
    await server.listen();
    const b = new NagareClient({ port: server.port, spillPath });
    assert.equal(await b.flush(5000), true);
    await server.waitForEvents(20);
    assert.deepEqual(seqs(server), range(0, 20));
    await b.close(1000);
    await server.stop();
  });

  test("spills while no server answers, with room in memory: the file a kill -9 leaves holds everything", async () => {
    const port = await refusedPort();
    const spillPath = path.join(tmp, "spill-outage.bin");
    const a = new NagareClient({ port, spillPath, backoffBaseMs: 20, backoffMaxMs: 50 });
    for (let i = 0; i < 100; i++) a.emit("outage", { seq: i });
    await until("first 100 on disk", () => a.stats().spillPending === 100);
    for (let i = 100; i < 200; i++) a.emit("outage", { seq: i }); // the client knows of the outage now
    await until("all 200 on disk", () => a.stats().spillPending === 200);
    const st = a.stats();
    assert.deepEqual([st.buffered, st.spilled, st.dropped], [0, 200, 0]);
    // the file as a kill -9 now would leave it
    const crashed = path.join(tmp, "spill-outage-crashed.bin");
    fs.copyFileSync(spillPath, crashed);
    const server = await TestServer.start();
    const b = new NagareClient({ port: server.port, spillPath: crashed, requireAck: true });
    assert.equal(await b.flush(5000), true);
    await server.waitForEvents(200);
    assert.deepEqual(seqs(server), range(0, 200));
    assert.deepEqual([b.stats().sent, b.stats().spillPending], [200, 0]);
  });

  test("overflow drop counts dropped events", async () => {
    const port = await refusedPort();
    const { errors, onError } = collectErrors();
    const client = new NagareClient({ port, bufferLimit: 1000, overflow: "drop", backoffBaseMs: 1000, onError });
    let accepted = 0;
    for (let i = 0; i < 100; i++) if (client.emit("drop", { seq: i, pad: "z".repeat(20) })) accepted++;
    const st = client.stats();
    assert.ok(st.dropped > 0);
    assert.equal(st.buffered, accepted);
    assert.equal(st.dropped + accepted, 100);
    await client.close(0);
    assert.equal(client.stats().dropped, 100);
    assert.ok(errors.some((e) => /^100 events dropped: buffer full: event dropped; close\(\)/.test(e.message)));
  });

  test("overflow block: emitAsync waits for room", async () => {
    const server = await TestServer.start();
    await server.stop();
    const client = new NagareClient({
      port: server.port,
      bufferLimit: 1000,
      overflow: "block",
      backoffBaseMs: 20,
      backoffMaxMs: 50,
    });
    let done = 0;
    const loop = (async () => {
      for (let i = 0; i < 200; i++) {
        assert.equal(await client.emitAsync("block", { seq: i, pad: "w".repeat(20) }), true);
        done++;
      }
    })();
    await sleep(300);
    assert.ok(done > 0 && done < 200, `emitAsync is waiting (done ${done})`);
    assert.equal(client.stats().dropped, 0);
    await server.listen();
    await loop;
    assert.equal(await client.flush(5000), true);
    await server.waitForEvents(200);
    assert.deepEqual(seqs(server), range(0, 200));
    await client.close(1000);
    await server.stop();
  });

  test("fails over to the next server and returns to the primary", async () => {
    const primary = await TestServer.start();
    const secondary = await TestServer.start();
    await primary.stop();
    const client = new NagareClient({
      servers: [{ port: primary.port }, { host: "127.0.0.1", port: secondary.port }],
      primaryRetryMs: 100,
      backoffBaseMs: 20,
    });
    for (let i = 0; i < 10; i++) client.emit("failover", { seq: i });
    assert.equal(await client.flush(5000), true);
    await secondary.waitForEvents(10);
    assert.deepEqual(seqs(secondary), range(0, 10));
    await primary.listen();
    const deadline = Date.now() + 5000;
    while (client.stats().reconnects === 0 && Date.now() < deadline) await sleep(10);
    assert.equal(client.stats().reconnects, 1, "switched back to the primary");
    for (let i = 10; i < 20; i++) client.emit("failover", { seq: i });
    assert.equal(await client.flush(5000), true);
    await primary.waitForEvents(10);
    assert.deepEqual(seqs(primary), range(10, 20));
    assert.deepEqual(seqs(secondary), range(0, 10));
    // the primary goes away: the next events fail over again
    await primary.stop();
    await sleep(50);
    for (let i = 20; i < 30; i++) client.emit("failover", { seq: i });
    assert.equal(await client.flush(5000), true);
    await secondary.waitForEvents(20);
    assert.deepEqual(seqs(secondary), [...range(0, 10), ...range(20, 30)]);
    await client.close(1000);
    await secondary.stop();
  });

  test("ack mode resends frames that were not acked in time", async () => {
    const server = await TestServer.start({ withholdFirstAcks: 1 });
    const client = new NagareClient({ port: server.port, requireAck: true, ackTimeoutMs: 300, backoffBaseMs: 20 });
    for (let i = 0; i < 10; i++) client.emit("ack", { seq: i });
    const t0 = Date.now();
    assert.equal(await client.flush(5000), true);
    assert.ok(Date.now() - t0 >= 250, "waited for the ack timeout");
    const chunks = [...server.chunkSeen.entries()];
    assert.equal(chunks.length, 1, "one chunk id");
    assert.equal(chunks[0]?.[1], 2, "the same chunk was sent twice");
    assert.deepEqual(seqs(server), [...range(0, 10), ...range(0, 10)]);
    const st = client.stats();
    assert.equal(st.sent, 10);
    assert.equal(st.acked, 1);
    assert.ok(st.retried >= 1);
    assert.ok(/^[A-Za-z0-9+/]{22}==$/.test(chunks[0]?.[0] ?? ""), "chunk id is base64 of 16 bytes");
    await client.close(1000);
    await server.stop();
  });

  test("UNIX socket", async () => {
    const sock = path.join(tmp, "fwd.sock");
    const server = await TestServer.start({ path: sock, sharedKey: "unix-key" });
    const client = new NagareClient({ path: sock, sharedKey: "unix-key", requireAck: true });
    for (let i = 0; i < 5; i++) client.emit("unix", { seq: i });
    assert.equal(await client.close(5000), true);
    assert.deepEqual(seqs(server), range(0, 5));
    await server.stop();
  });

  test("TLS: verified against the server's CA; an unknown CA is refused", async () => {
    const fixtures = path.resolve(__dirname, "..", "..", "test", "fixtures");
    const cert = fs.readFileSync(path.join(fixtures, "cert.pem"));
    const key = fs.readFileSync(path.join(fixtures, "key.pem"));
    const server = await TestServer.start({ tls: { cert, key }, sharedKey: "tls-key" });
    const client = new NagareClient({ port: server.port, tls: { ca: cert }, sharedKey: "tls-key", requireAck: true });
    for (let i = 0; i < 5; i++) client.emit("tls", { seq: i });
    assert.equal(await client.close(5000), true);
    assert.deepEqual(seqs(server), range(0, 5));

    const { errors, onError } = collectErrors();
    const untrusting = new NagareClient({ port: server.port, tls: true, sharedKey: "tls-key", onError });
    untrusting.emit("tls", { seq: 5 });
    assert.equal(await untrusting.flush(300), false);
    assert.ok(
      errors.some((e) => /self[- ]signed|unable to verify|certificate/i.test(e.message)),
      errors.map((e) => e.message).join("; "),
    );
    assert.deepEqual(seqs(server), range(0, 5));
  });

  test("close() flushes what is buffered", async () => {
    const server = await TestServer.start();
    const client = new NagareClient({ port: server.port, flushIntervalMs: 1000 });
    for (let i = 0; i < 100; i++) client.emit("close", { seq: i });
    assert.equal(server.events.length, 0);
    assert.equal(await client.close(5000), true);
    await server.waitForEvents(100);
    assert.deepEqual(seqs(server), range(0, 100));
    assert.equal(client.stats().buffered, 0);
    assert.equal(client.emit("close", { seq: 100 }), false, "emit after close is refused");
    await server.stop();
  });

  test("shared key handshake: right key delivers, wrong key is refused", async () => {
    const server = await TestServer.start({ sharedKey: "s3cret" });
    const good = new NagareClient({ port: server.port, sharedKey: "s3cret" });
    good.emit("hs", { seq: 0 });
    assert.equal(await good.close(5000), true);
    await server.waitForEvents(1);
    assert.deepEqual(seqs(server), [0]);

    const { errors, onError } = collectErrors();
    const bad = new NagareClient({ port: server.port, sharedKey: "wrong", onError, backoffBaseMs: 50 });
    bad.emit("hs", { seq: 1 });
    assert.equal(await bad.flush(300), false);
    assert.ok(
      errors.some((e) => /shared key mismatch/.test(e.message)),
      errors.map((e) => e.message).join("; "),
    );
    await bad.close(0);

    // Without a key the client cannot know the server wants one until HELO
    // arrives: the error is reported and the server takes nothing.
    const { errors: e2, onError: o2 } = collectErrors();
    const none = new NagareClient({ port: server.port, onError: o2, backoffBaseMs: 50 });
    none.emit("hs", { seq: 2 });
    await none.flush(300);
    const deadline = Date.now() + 2000;
    while (!e2.some((e) => /shared key/.test(e.message)) && Date.now() < deadline) await sleep(10);
    assert.ok(
      e2.some((e) => /shared key/.test(e.message)),
      e2.map((e) => e.message).join("; "),
    );
    await none.close(0);
    assert.deepEqual(seqs(server), [0]);
    await server.stop();
  });

  test("a record that cannot be encoded is dropped, not thrown", async () => {
    const { errors, onError } = collectErrors();
    const client = new NagareClient({ port: await refusedPort(), onError });
    assert.equal(client.emit("bad", { big: 2n ** 70n }), false);
    assert.equal(client.emit("bad", [1, 2] as unknown as object), false);
    assert.equal(client.emit("", { a: 1 }), false);
    assert.equal(client.stats().dropped, 3);
    assert.equal(client.stats().buffered, 0);
    await client.close(0);
    // one report for the burst, with its count
    assert.equal(errors.length, 1);
    assert.match(errors[0]?.message ?? "", /^3 events dropped: cannot encode event for tag bad: /);
  });

  test("a burst of drops is one onError call with the count", async () => {
    const { errors, onError } = collectErrors();
    const client = new NagareClient({ port: await refusedPort(), bufferLimit: 1000, onError, backoffBaseMs: 5000 });
    let accepted = 0;
    for (let i = 0; i < 20_000; i++) if (client.emit("burst", { seq: i })) accepted++;
    const dropped = 20_000 - accepted;
    assert.ok(dropped > 19_000);
    await client.close(0);
    const drops = errors.filter((e) => /events dropped/.test(e.message));
    assert.equal(drops.length, 1, drops.map((e) => e.message).join("; "));
    assert.match(drops[0]?.message ?? "", new RegExp(`^${dropped + accepted} events dropped`));
    const st = client.stats();
    assert.equal(st.sent + st.dropped + st.spillPending, 20_000);
  });

  test("close() reconnects at once after a long backoff and delivers everything", async () => {
    const port = await refusedPort();
    const { errors, onError } = collectErrors();
    // after the first refused connect the client waits 10-20 s
    const client = new NagareClient({ port, backoffBaseMs: 20_000, backoffMaxMs: 30_000, onError });
    for (let i = 0; i < 1000; i++) client.emit("late", { seq: i });
    while (errors.length === 0) await sleep(5);
    const server = await TestServer.start({ port });
    const t0 = Date.now();
    assert.equal(await client.close(5000), true);
    assert.ok(Date.now() - t0 < 5000);
    await server.waitForEvents(1000);
    assert.deepEqual(seqs(server), range(0, 1000));
    const st = client.stats();
    assert.deepEqual([st.sent, st.dropped, st.spillPending, st.buffered], [1000, 0, 0, 0]);
  });

  test("counters add up after close: a default spill file's events count as dropped", async () => {
    const client = new NagareClient({ port: await refusedPort(), bufferLimit: 1000, overflow: "spill" });
    for (let i = 0; i < 300; i++) client.emit("count", { seq: i });
    assert.equal(await client.close(100), false);
    const st = client.stats();
    assert.deepEqual([st.sent, st.dropped, st.spillPending, st.buffered], [0, 300, 0, 0]);
  });
});
