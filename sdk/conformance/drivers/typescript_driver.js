// Conformance driver for the TypeScript library (protocol: sdk/conformance/README.md).
// Needs the built library: npm ci && npm run build in sdk/typescript.
"use strict";
const fs = require("node:fs");
const readline = require("node:readline");
const { NagareClient } = require("../../typescript/dist/index.js");
const { NagareTransport } = require("../../typescript/dist/winston.js");

let client;
let clientOptions; // what configure gave the client: the pino transport's worker gets the same
let pinoTransport; // the pino transport's stream, when "log TAG N pino" started one
let blockMode = false;
let refused = 0; // connection attempts refused (the runner waits on it, not on sleeps)
const seqs = new Map();

async function handle(cmd, arg) {
  switch (cmd) {
    case "configure": {
      const o = JSON.parse(arg);
      clientOptions = {
        servers: o.servers.map((s) => {
          if (s.startsWith("unix://"))
            return { path: s.slice("unix://".length) };
          const i = s.lastIndexOf(":");
          const tls = o.tls_ca ? { ca: fs.readFileSync(o.tls_ca) } : undefined;
          return { host: s.slice(0, i), port: Number(s.slice(i + 1)), tls };
        }),
        spillPath: o.spill_path,
        requireAck: o.require_ack ?? false,
        backoffBaseMs: o.backoff_base_ms ?? 100,
        backoffMaxMs: o.backoff_max_ms ?? 30000,
        bufferLimit: o.buffer_bytes,
        overflow: o.overflow,
      };
      client = new NagareClient({
        ...clientOptions,
        onError: (e) => {
          if (/ECONNREFUSED/.test(e.message)) refused++;
        },
      });
      // emit() never blocks the event loop: block mode is emitAsync()
      blockMode = o.overflow === "block";
      return { ok: true };
    }
    case "emit": {
      const [tag, n] = arg.split(" ");
      const start = seqs.get(tag) ?? 0;
      seqs.set(tag, start + Number(n));
      let accepted = 0;
      for (let i = start; i < start + Number(n); i++) {
        if (
          blockMode
            ? await client.emitAsync(tag, { seq: i })
            : client.emit(tag, { seq: i })
        )
          accepted++;
      }
      return { accepted };
    }
    case "log": {
      const [tag, n, integration = "winston"] = arg.split(" ");
      const start = seqs.get(tag) ?? 0;
      seqs.set(tag, start + Number(n));
      if (integration === "pino") return logPino(tag, start, Number(n));
      if (integration !== "winston")
        return { error: `no logging integration ${integration}` };
      // through the winston integration: message "seq N", seq also a meta field
      const winston = require("../../typescript/node_modules/winston");
      const transport = new NagareTransport({ client, tag });
      let logged = 0;
      transport.on("logged", () => logged++);
      const logger = winston.createLogger({ transports: [transport] });
      for (let i = start; i < start + Number(n); i++)
        logger.info(`seq ${i}`, { seq: i });
      // winston hands records to the transport asynchronously: wait for all
      for (
        const until = Date.now() + 20_000;
        logged < Number(n) && Date.now() < until;
      ) {
        await new Promise((r) => setTimeout(r, 5));
      }
      return { logged };
    }
    case "close": {
      const t0 = Date.now();
      if (pinoTransport) {
        // ending pino's stream closes the transport in its worker, which closes its client
        // (closeTimeoutMs); its result does not cross into this thread: closed is null
        const ended = new Promise((resolve) =>
          pinoTransport.once("close", resolve),
        );
        pinoTransport.end();
        await ended;
        await client.close(Number(arg));
        return { closed: null, ms: Date.now() - t0 };
      }
      const closed = await client.close(Number(arg));
      return { closed, ms: Date.now() - t0 };
    }
    case "stats": {
      const s = client.stats();
      // kept: events still in the spill file
      return {
        sent: s.sent,
        dropped: s.dropped,
        kept: s.spillPending,
        buffered: s.buffered,
        connect_failures: refused,
      };
    }
    default:
      return { error: `unknown command ${cmd}` };
  }
}

// n records through the pino transport, as its README shows it: pino.transport() with the
// client options runs it in pino's worker thread with a client of its own
function logPino(tag, start, n) {
  const pino = require("../../typescript/node_modules/pino");
  pinoTransport = pino.transport({
    target: require.resolve("../../typescript/dist/pino.js"),
    // the same options as the driver's client (no onError: a function cannot cross into the worker)
    options: { ...clientOptions, tag, closeTimeoutMs: 10_000 },
  });
  const logger = pino(pinoTransport);
  for (let i = start; i < start + n; i++) logger.info({ seq: i }, `seq ${i}`);
  return { logged: n };
}

const rl = readline.createInterface({ input: process.stdin });
const lines = rl[Symbol.asyncIterator]();
(async () => {
  for (;;) {
    const { value, done } = await lines.next();
    if (done) break;
    const line = value.trim();
    const sp = line.indexOf(" ");
    const cmd = sp < 0 ? line : line.slice(0, sp);
    const arg = sp < 0 ? "" : line.slice(sp + 1);
    if (cmd === "quit") break;
    let reply;
    try {
      reply = await handle(cmd, arg);
    } catch (e) {
      reply = { error: String(e && e.message ? e.message : e) };
    }
    process.stdout.write(JSON.stringify(reply) + "\n");
  }
  process.exit(0);
})();
