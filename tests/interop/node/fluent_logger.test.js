'use strict';
// Interop: the npm `fluent-logger` client sends into nagare in every event
// mode it has (Message, PackedForward, CompressedPackedForward), with and
// without acks and with the shared-key handshake; every event arrives.
//
// Runs target/release/nagare (NAGARE_BIN overrides) on free loopback ports
// with a file output.

const test = require('node:test');
const assert = require('node:assert');
const { spawn } = require('node:child_process');
const fs = require('node:fs');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');
const logger = require('fluent-logger');

const ROOT = path.resolve(__dirname, '..', '..', '..');
const NAGARE = process.env.NAGARE_BIN || path.join(ROOT, 'target', 'release', 'nagare');
const WAIT_MS = 20000;
const N = 2000;

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

async function waitUntil(what, cond, timeoutMs = WAIT_MS) {
  const end = Date.now() + timeoutMs;
  while (Date.now() < end) {
    if (await cond()) return;
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
}

function canConnect(port) {
  return new Promise((resolve) => {
    const c = net.connect({ host: '127.0.0.1', port }, () => {
      c.end();
      resolve(true);
    });
    c.on('error', () => resolve(false));
  });
}

async function startNagare(extraInput = '') {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'nagare-node-'));
  const port = await freePort();
  const out = path.join(dir, 'events.log');
  const config = path.join(dir, 'nagare.toml');
  fs.writeFileSync(
    config,
    `[[input]]
type = "forward"
bind = "127.0.0.1:${port}"
${extraInput}

[[output]]
type = "file"
match = "**"
path = "${out}"
[output.buffer]
flush_interval = "50ms"
`
  );
  let stderr = '';
  let exited = null;
  const proc = spawn(NAGARE, ['run', '-c', config], {
    stdio: ['ignore', 'ignore', 'pipe'],
    env: { ...process.env, NAGARE_LOG: 'info' },
  });
  proc.stderr.on('data', (d) => (stderr += d));
  const exit = new Promise((resolve) =>
    proc.on('exit', (code, signal) => {
      exited = { code, signal };
      resolve(exited);
    })
  );
  await waitUntil(`nagare on 127.0.0.1:${port}`, async () => {
    if (exited) throw new Error(`nagare exited ${JSON.stringify(exited)}: ${stderr}`);
    return canConnect(port);
  });
  // Whole lines only: the file output may be writing the last one while
  // the test reads (a cut line is not JSON yet).
  const events = () => {
    if (!fs.existsSync(out)) return [];
    const text = fs.readFileSync(out, 'utf8');
    return text
      .slice(0, text.lastIndexOf('\n') + 1)
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l));
  };
  return {
    port,
    events,
    stderr: () => stderr,
    async waitEvents(n) {
      await waitUntil(`${n} events in ${out}`, () => events().length >= n);
      return events();
    },
    async stop() {
      if (!exited) proc.kill('SIGTERM');
      const timer = setTimeout(() => proc.kill('SIGKILL'), WAIT_MS);
      const r = await exit;
      clearTimeout(timer);
      fs.rmSync(dir, { recursive: true, force: true });
      return r;
    },
  };
}

function checkExact(events, tag, n) {
  const seqs = events.map((e) => e.record.seq).sort((a, b) => a - b);
  assert.strictEqual(seqs.length, n, `expected ${n} events, got ${seqs.length}`);
  seqs.forEach((s, i) => assert.strictEqual(s, i, `seq ${i} missing or duplicated`));
  for (const e of events) assert.strictEqual(e.tag, tag);
  for (const e of events.slice(0, 10)) assert.strictEqual(e.record.message, `event number ${e.record.seq}`);
}

function emitAll(sender, label, n) {
  return new Promise((resolve, reject) => {
    let done = 0;
    sender.on('error', reject);
    for (let i = 0; i < n; i++) {
      sender.emit(label, { seq: i, message: `event number ${i}` }, (err) => {
        if (err) return reject(err);
        if (++done === n) resolve();
      });
    }
  });
}

function endSender(sender) {
  return new Promise((resolve) => sender.end(null, null, resolve));
}

const cases = [
  { name: 'Message', opts: { eventMode: 'Message' } },
  { name: 'Message with acks', opts: { eventMode: 'Message', requireAckResponse: true } },
  { name: 'PackedForward', opts: { eventMode: 'PackedForward', flushInterval: 20 } },
  {
    name: 'CompressedPackedForward with acks',
    opts: { eventMode: 'CompressedPackedForward', flushInterval: 20, requireAckResponse: true },
  },
  {
    name: 'shared-key handshake',
    opts: {
      eventMode: 'PackedForward',
      flushInterval: 20,
      requireAckResponse: true,
      security: { clientHostname: 'node-client', sharedKey: 'interop secret' },
    },
    input: 'shared_key = "interop secret"\nself_hostname = "nagare-test"',
  },
  {
    name: 'shared key with username and password',
    opts: {
      eventMode: 'Message',
      requireAckResponse: true,
      security: {
        clientHostname: 'node-client',
        sharedKey: 'interop secret',
        username: 'alice',
        password: 'wonderland',
      },
    },
    input:
      'shared_key = "interop secret"\n[[input.users]]\nusername = "alice"\npassword = "wonderland"',
  },
];

for (const c of cases) {
  test(`fluent-logger ${c.name}: every event arrives`, async () => {
    const nagare = await startNagare(c.input || '');
    try {
      const sender = logger.createFluentSender('node', {
        host: '127.0.0.1',
        port: nagare.port,
        timeout: 5.0,
        reconnectInterval: 200,
        ackResponseTimeout: 10000,
        internalLogger: { info() {}, error() {} },
        ...c.opts,
      });
      await emitAll(sender, 'ev', N);
      await endSender(sender);
      const events = await nagare.waitEvents(N);
      checkExact(events, 'node.ev', N);
    } catch (e) {
      e.message += `\nnagare stderr:\n${nagare.stderr()}`;
      throw e;
    } finally {
      const r = await nagare.stop();
      assert.deepStrictEqual(r, { code: 0, signal: null }, nagare.stderr());
    }
  });
}
