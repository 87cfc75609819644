/**
 * Throughput and per-call cost of emit() into a forward sink (flowbench), for
 * @nagare/logger and for fluent-logger 3.4 (the established Node client).
 *
 *   npm run bench -- [--events 1000000] [--runs 3] [--flowbench PATH]
 *
 * One emitting loop (the main thread) sends records {seq, message: 100 bytes}.
 * It emits in chunks of 1000 and yields to the event loop between chunks, so
 * both libraries get to write (neither has a sending thread of its own).
 * Reported per library: events/s from the first emit until everything was
 * handed to the socket and the sink counted it, the sink's own rate, and the
 * mean time spent inside one emit() call.
 *
 * NAGARE_SINK=1 sends into the nagare daemon instead of flowbench sink ($NAGARE_BIN, default
 * target/release/nagare: forward input -> null output, with its monitor); a run ends when the
 * monitor's count of events at the null output reaches the number sent.
 *
 *   NAGARE_SINK=1 npm run bench -- --events 1000000 --runs 3
 */
import { type ChildProcess, spawn } from "node:child_process";
import * as fs from "node:fs";
import * as net from "node:net";
import * as os from "node:os";
import * as path from "node:path";
import { NagareClient } from "../src/client";

// fluent-logger has no bundled types we rely on: a minimal shape of what is used.
interface FluentSender {
  emit(label: string, data: object, timestampOrCb?: unknown, cb?: (err?: Error) => void): void;
  end(label?: string, data?: object, cb?: () => void): void;
  on(ev: string, f: (e: Error) => void): void;
}
const fluent = require("fluent-logger") as {
  createFluentSender(prefix: string | null, opts: object): FluentSender;
  EventTime: { now(): unknown };
};

const args = process.argv.slice(2);
function arg(name: string, def: string): string {
  const i = args.indexOf(`--${name}`);
  return i >= 0 && args[i + 1] !== undefined ? (args[i + 1] as string) : def;
}
const EVENTS = Number(arg("events", "1000000"));
const RUNS = Number(arg("runs", "3"));
const FLOWBENCH = arg("flowbench", path.resolve(__dirname, "../../../../../shared/bench/bin/flowbench"));
const NAGARE_SINK = process.env.NAGARE_SINK === "1";
const NAGARE_BIN = process.env.NAGARE_BIN ?? path.resolve(__dirname, "../../../../target/release/nagare");
const NULL_IN = 'nagare_events_in_total{plugin="null#0",kind="output",type="null"} ';
const CHUNK = 1000;
const MESSAGE = "x".repeat(100);

interface Result {
  eventsPerS: number;
  sinkEventsPerS: number;
  emitNs: number;
  received: number;
}

async function freePort(): Promise<number> {
  const s = net.createServer();
  await new Promise<void>((r) => s.listen(0, "127.0.0.1", r));
  const port = (s.address() as net.AddressInfo).port;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

async function listening(port: number): Promise<boolean> {
  return new Promise<boolean>((r) => {
    const c = net.connect(port, "127.0.0.1");
    c.once("connect", () => {
      c.destroy();
      r(true);
    });
    c.once("error", () => r(false));
  });
}

/** The count of events nagare's null output received, from its monitor. */
async function nullCount(url: string): Promise<number> {
  const body = await (await fetch(url)).text();
  const line = body.split("\n").find((l) => l.startsWith(NULL_IN));
  return line === undefined ? -1 : Number(line.slice(NULL_IN.length));
}

/** nagare with a forward input on PORT and a null output; its metrics URL. */
async function startNagare(port: number): Promise<{ proc: ChildProcess; metrics: string; dir: string }> {
  const mport = await freePort();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "nagare-bench-"));
  const conf = path.join(dir, "nagare.toml");
  fs.writeFileSync(
    conf,
    `[[input]]\ntype = "forward"\nbind = "127.0.0.1:${port}"\n\n[[output]]\ntype = "null"\nmatch = "**"\n\n` +
      `[monitor]\nbind = "127.0.0.1:${mport}"\n`,
  );
  const proc = spawn(NAGARE_BIN, ["run", "-c", conf], { stdio: ["ignore", "ignore", "ignore"] });
  for (let i = 0; i < 200; i++) {
    if ((await listening(port)) && (await listening(mport))) {
      const metrics = `http://127.0.0.1:${mport}/metrics`;
      await nullCount(metrics); // connect once before the clock starts
      return { proc, metrics, dir };
    }
    await new Promise((r) => setTimeout(r, 20));
  }
  proc.kill();
  throw new Error(`${NAGARE_BIN} did not start`);
}

async function startSink(port: number): Promise<{ proc: ChildProcess; summary: Promise<{ [k: string]: unknown }> }> {
  const proc = spawn(FLOWBENCH, ["sink", "--listen", `127.0.0.1:${port}`, "--idle-exit", "3s", "--quiet"], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  let out = "";
  proc.stdout?.setEncoding("utf8").on("data", (d: string) => {
    out += d;
  });
  const summary = new Promise<{ [k: string]: unknown }>((resolve, reject) => {
    proc.once("exit", () => {
      const line = out.trim().split("\n").pop() ?? "";
      try {
        resolve(JSON.parse(line));
      } catch {
        reject(new Error(`flowbench sink printed no summary: ${out}`));
      }
    });
  });
  for (let i = 0; i < 200; i++) {
    if (await listening(port)) return { proc, summary };
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error("flowbench sink did not start");
}

type Emitter = {
  emit: (i: number) => void;
  finish: () => Promise<void>;
};

async function run(make: (port: number) => Emitter): Promise<Result> {
  const port = await freePort();
  const nagareSink = NAGARE_SINK ? await startNagare(port) : undefined;
  const sink = nagareSink ? undefined : await startSink(port);
  const e = make(port);
  let inEmit = 0n;
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < EVENTS;) {
    const a = process.hrtime.bigint();
    const end = Math.min(EVENTS, i + CHUNK);
    for (; i < end; i++) e.emit(i);
    inEmit += process.hrtime.bigint() - a;
    await new Promise((r) => setImmediate(r));
  }
  await e.finish();
  let t1 = process.hrtime.bigint();
  let s: { [k: string]: unknown };
  if (nagareSink) {
    // wait (at most 60 s) until nagare's null output counted every event; the run ends then
    let got = await nullCount(nagareSink.metrics);
    for (const until = Date.now() + 60_000; got < EVENTS && Date.now() < until;) {
      await new Promise((r) => setTimeout(r, 1));
      got = await nullCount(nagareSink.metrics);
    }
    t1 = process.hrtime.bigint();
    const exited = new Promise((r) => nagareSink.proc.once("exit", r));
    nagareSink.proc.kill("SIGTERM");
    await exited;
    fs.rmSync(nagareSink.dir, { recursive: true, force: true });
    s = { events: got, events_per_s: got / (Number(t1 - t0) / 1e9) };
  } else {
    s = await (sink as { summary: Promise<{ [k: string]: unknown }> }).summary;
  }
  const received = Number(s.events);
  return {
    eventsPerS: EVENTS / (Number(t1 - t0) / 1e9),
    sinkEventsPerS: Number(s.events_per_s),
    emitNs: Number(inEmit) / EVENTS,
    received,
  };
}

function nagare(port: number): Emitter {
  const client = new NagareClient({ port, bufferLimit: 64 * 1024 * 1024, overflow: "drop" });
  return {
    emit: (i) => {
      client.emit("bench.nagare", { seq: i, message: MESSAGE });
    },
    finish: async () => {
      if (!(await client.close(60_000))) throw new Error("nagare client did not deliver everything");
      if (client.stats().dropped > 0) throw new Error(`dropped ${client.stats().dropped}`);
    },
  };
}

function fluentLogger(mode: "Message" | "PackedForward", eventTime = true) {
  return (port: number): Emitter => {
    const sender = fluent.createFluentSender(null, { host: "127.0.0.1", port, eventMode: mode, flushInterval: 20 });
    sender.on("error", (e) => console.error("fluent-logger:", e.message));
    let last: Promise<void> = Promise.resolve();
    return {
      emit: (i) => {
        if (i === EVENTS - 1) {
          // fluent-logger takes the callback as the 3rd argument when there is no timestamp
          last = new Promise((r) => {
            if (eventTime) sender.emit("bench.fluent", { seq: i, message: MESSAGE }, fluent.EventTime.now(), () => r());
            else sender.emit("bench.fluent", { seq: i, message: MESSAGE }, () => r());
          });
        } else if (eventTime) {
          sender.emit("bench.fluent", { seq: i, message: MESSAGE }, fluent.EventTime.now());
        } else {
          sender.emit("bench.fluent", { seq: i, message: MESSAGE });
        }
      },
      finish: async () => {
        await last;
        await new Promise<void>((r) => sender.end(undefined, undefined, r));
      },
    };
  };
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)] as number;
}

async function main(): Promise<void> {
  if (NAGARE_SINK) {
    if (!fs.existsSync(NAGARE_BIN)) throw new Error(`${NAGARE_BIN} missing: cargo build --release`);
    console.error(`receiver: nagare (${NAGARE_BIN}), forward input -> null output`);
  } else if (!fs.existsSync(FLOWBENCH)) {
    throw new Error(`${FLOWBENCH} missing: cd shared/bench/flowbench && go build -o ../bin/flowbench ./...`);
  }
  const libs: [string, (port: number) => Emitter][] = [
    ["@nagare/logger (PackedForward, EventTime)", nagare],
    ["fluent-logger 3.4 Message mode (EventTime)", fluentLogger("Message")],
    ["fluent-logger 3.4 PackedForward (EventTime)", fluentLogger("PackedForward")],
    ["fluent-logger 3.4 PackedForward (integer seconds)", fluentLogger("PackedForward", false)],
  ];
  const table: { [k: string]: { eventsPerS: number; sinkEventsPerS: number; emitNs: number } } = {};
  // run by run, each library in turn (ours, theirs, ours, theirs...): a load
  // change on a busy machine lands on every side, not on one library's runs
  const results = new Map<string, Result[]>(libs.map(([name]) => [name, []]));
  for (let r = 0; r < RUNS; r++) {
    for (const [name, make] of libs) {
      const res = await run(make);
      if (res.received !== EVENTS) throw new Error(`${name}: sink received ${res.received} of ${EVENTS}`);
      console.error(
        `${name} run ${r + 1}: ${Math.round(res.eventsPerS)} ev/s (sink ${Math.round(res.sinkEventsPerS)}), emit ${res.emitNs.toFixed(0)} ns`,
      );
      results.get(name)?.push(res);
    }
  }
  for (const [name] of libs) {
    const rs = results.get(name) ?? [];
    table[name] = {
      eventsPerS: Math.round(median(rs.map((r) => r.eventsPerS))),
      sinkEventsPerS: Math.round(median(rs.map((r) => r.sinkEventsPerS))),
      emitNs: Math.round(median(rs.map((r) => r.emitNs))),
    };
  }
  console.log(`events=${EVENTS} runs=${RUNS} record={seq, message: 100 bytes}, medians:`);
  console.table(table);
  // like with like: neither side waits for acks
  const ours = table[libs[0]?.[0] as string];
  const best = Math.max(...libs.slice(1).map(([n]) => table[n]?.eventsPerS ?? 0));
  const cheapest = Math.min(...libs.slice(1).map(([n]) => table[n]?.emitNs ?? Infinity));
  console.log(
    `vs best fluent-logger mode: ${((ours?.eventsPerS ?? 0) / best).toFixed(2)}x events/s, ` +
      `${(cheapest / (ours?.emitNs ?? 1)).toFixed(2)}x cheaper emit`,
  );
}

let finished = false;
process.on("exit", () => {
  if (!finished) {
    console.error("bench ended before it finished (a library never reported delivery)");
    process.exitCode = 1;
  }
});
main()
  .then(() => {
    finished = true;
  })
  .catch((e) => {
    console.error(e);
    process.exit(1);
  });
