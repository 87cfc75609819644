/**
 * End to end against the real daemon: `nagare run -c CONFIG` with a forward
 * input and a stdout output. NAGARE_BIN overrides the binary path (default
 * <repo>/target/release/nagare). A missing binary fails this test.
 */
import * as assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { describe, test } from "node:test";
import { NagareClient } from "../src/client";
import { refusedPort } from "./server";

// dist-test/test -> repository root
const REPO = path.resolve(__dirname, "..", "..", "..", "..");
const BIN = process.env.NAGARE_BIN ?? path.join(REPO, "target", "release", "nagare");

interface Daemon {
  proc: ChildProcess;
  lines: () => { tag: string; record: { [k: string]: unknown }; time: string }[];
  /** stdout's event lines as text (JSON.parse would round 64-bit integers). */
  rawLines: () => string[];
  stop: () => Promise<void>;
}

function startNagare(inputExtra: string, bind: string): Daemon {
  if (!fs.existsSync(BIN)) {
    throw new Error(`nagare binary not found at ${BIN}: build it (cargo build --release) or set NAGARE_BIN`);
  }
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "nagare-ts-e2e-"));
  const config = path.join(dir, "nagare.toml");
  fs.writeFileSync(
    config,
    `[[input]]\ntype = "forward"\n${bind}\n${inputExtra}\n\n[[output]]\ntype = "stdout"\nmatch = "**"\n`,
  );
  const proc = spawn(BIN, ["run", "-c", config], { stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  let err = "";
  proc.stdout?.setEncoding("utf8").on("data", (d: string) => {
    out += d;
  });
  proc.stderr?.setEncoding("utf8").on("data", (d: string) => {
    err += d;
  });
  const exited = new Promise<void>((r) => proc.once("exit", () => r()));
  return {
    proc,
    // complete lines only: a read can end inside a line, whose rest comes with the next one
    lines: () =>
      complete(out)
        .filter((l) => l.startsWith("{"))
        .map((l) => JSON.parse(l)),
    rawLines: () => complete(out).filter((l) => l.startsWith("{")),
    stop: async () => {
      if (proc.exitCode === null) proc.kill("SIGTERM");
      const timer = setTimeout(() => proc.kill("SIGKILL"), 10_000);
      await exited;
      clearTimeout(timer);
      fs.rmSync(dir, { recursive: true, force: true });
      if (process.env.NAGARE_TEST_VERBOSE) process.stderr.write(err);
    },
  };
}

function complete(out: string): string[] {
  return out.slice(0, out.lastIndexOf("\n") + 1).split("\n");
}

async function waitForLines(d: Daemon, n: number, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (d.lines().length < n) {
    if (d.proc.exitCode !== null) throw new Error(`nagare exited with ${d.proc.exitCode}`);
    if (Date.now() > deadline) throw new Error(`nagare printed ${d.lines().length} of ${n} events`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe("against the nagare daemon", () => {
  test("TCP: N events arrive as N JSON lines with their seq", async () => {
    const port = await refusedPort();
    const d = startNagare("", `bind = "127.0.0.1:${port}"`);
    try {
      const client = new NagareClient({ port, backoffBaseMs: 50, backoffMaxMs: 500 });
      const N = 2000;
      for (let i = 0; i < N; i++) client.emit("e2e.ts", { seq: i, message: "hello from typescript", n: i * 1.5 });
      assert.equal(await client.close(20_000), true);
      await waitForLines(d, N, 15_000);
      const lines = d.lines();
      assert.equal(lines.length, N);
      assert.deepEqual(
        lines.map((l) => l.record.seq),
        Array.from({ length: N }, (_, i) => i),
      );
      assert.equal(lines[7]?.tag, "e2e.ts");
      assert.equal(lines[7]?.record.message, "hello from typescript");
      assert.match(lines[7]?.time ?? "", /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}/);
    } finally {
      await d.stop();
    }
  });

  test("bigint and Date arrive as 64-bit integers and RFC 3339 times", async () => {
    const port = await refusedPort();
    const d = startNagare("", `bind = "127.0.0.1:${port}"`);
    try {
      const client = new NagareClient({ port, backoffBaseMs: 50, backoffMaxMs: 500 });
      const at = new Date(Date.UTC(2026, 10, 24, 9, 30, 15, 250));
      const record = {
        small: 5n,
        big: 2n ** 63n + 1n,
        neg: -(2n ** 62n),
        at,
        whole: new Date(0),
        before: new Date(-1500),
        map: new Map<string, unknown>([
          ["id", 7n],
          ["seen", new Date(0)],
        ]),
      };
      assert.equal(client.emit("e2e.types", record), true);
      assert.equal(await client.close(20_000), true);
      assert.equal(client.stats().dropped, 0);
      await waitForLines(d, 1, 15_000);
      const line = d.rawLines()[0] ?? "";
      const want =
        '"record":{"small":5,"big":9223372036854775809,"neg":-4611686018427387904,' +
        '"at":"2026-11-24T09:30:15.250Z","whole":"1970-01-01T00:00:00Z","before":"1969-12-31T23:59:58.500Z",' +
        '"map":{"id":7,"seen":"1970-01-01T00:00:00Z"}}';
      assert.ok(line.includes(want), line);
    } finally {
      await d.stop();
    }
  });

  test("UNIX socket with shared key and acks", async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "nagare-ts-sock-"));
    const sock = path.join(dir, "fwd.sock");
    let d: Daemon | undefined;
    try {
      d = startNagare(`shared_key = "ts-secret"`, `path = "${sock}"`);
      const client = new NagareClient({
        path: sock,
        sharedKey: "ts-secret",
        requireAck: true,
        ackTimeoutMs: 5000,
        backoffBaseMs: 50,
        backoffMaxMs: 500,
      });
      const N = 500;
      for (let i = 0; i < N; i++) client.emit("e2e.unix", { seq: i });
      assert.equal(await client.close(20_000), true);
      assert.equal(client.stats().acked > 0, true);
      await waitForLines(d, N, 15_000);
      assert.deepEqual(
        d.lines().map((l) => l.record.seq),
        Array.from({ length: N }, (_, i) => i),
      );
    } finally {
      await d?.stop();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
