import * as assert from "node:assert/strict";
import { once } from "node:events";
import * as path from "node:path";
import { describe, test } from "node:test";
import pino from "pino";
import winston from "winston";
import { NagareTransport } from "../src/winston";
import { TestServer } from "./server";

describe("logging framework integrations", () => {
  test("pino transport (worker thread) delivers every line with pino's time", async () => {
    const server = await TestServer.start();
    try {
      const transport = pino.transport({
        target: path.join(__dirname, "..", "src", "pino.js"),
        options: { port: server.port, tag: "pino.test", tagKey: "tag", flushIntervalMs: 5 },
      });
      const logger = pino(transport);
      for (let i = 0; i < 20; i++) logger.info({ seq: i }, "hello %d", i);
      logger.warn({ seq: 20, tag: "pino.other" }, "routed by tagKey");
      const before = Date.now();
      logger.flush();
      transport.end();
      await once(transport, "close");
      await server.waitForEvents(21, 5000);
      const main = server.events.filter((e) => e.tag === "pino.test");
      assert.deepEqual(
        main.map((e) => e.record.seq),
        Array.from({ length: 20 }, (_, i) => i),
      );
      assert.equal(main[3]?.record.msg, "hello 3");
      assert.equal(main[3]?.record.level, 30);
      const other = server.events.filter((e) => e.tag === "pino.other");
      assert.equal(other.length, 1);
      assert.equal(other[0]?.record.level, 40);
      const f = server.frames.find((r) => r.frame.tag === "pino.test")?.frame;
      const e0 = f?.entries[0];
      assert.ok(e0);
      assert.equal(e0.time.sec * 1000 + Math.floor(e0.time.nsec / 1e6), e0.record.time, "event time = pino time");
      assert.ok(Math.abs((e0.record.time as number) - before) < 10_000);
    } finally {
      await server.stop();
    }
  });

  test("winston transport delivers info objects", async () => {
    const server = await TestServer.start();
    try {
      const transport = new NagareTransport({ port: server.port, tag: "winston.test", requireAck: true });
      const logger = winston.createLogger({
        level: "debug",
        format: winston.format.combine(winston.format.errors(), winston.format.json()),
        transports: [transport],
      });
      for (let i = 0; i < 20; i++) logger.info("hello", { seq: i, user: { id: i } });
      logger.debug("last", { seq: 20 });
      // wait until winston handed all 21 entries to the transport, then flush
      const deadline = Date.now() + 5000;
      while (transport.client.stats().sent + transport.client.stats().buffered < 21 && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 5));
      }
      assert.equal(await transport.client.flush(5000), true);
      await server.waitForEvents(21, 5000);
      const ev = server.events;
      assert.ok(ev.every((e) => e.tag === "winston.test"));
      assert.deepEqual(
        ev.map((e) => e.record.seq),
        Array.from({ length: 21 }, (_, i) => i),
      );
      assert.deepEqual(ev[5]?.record, { level: "info", message: "hello", seq: 5, user: { id: 5 } });
      assert.equal(ev[20]?.record.level, "debug");
      const closed = once(transport, "closed");
      logger.close();
      await closed;
      assert.equal(transport.client.stats().buffered, 0);
    } finally {
      await server.stop();
    }
  });
});
