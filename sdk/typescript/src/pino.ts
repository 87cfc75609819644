/**
 * pino transport: `pino.transport({ target: "@nagare/logger/pino", options })`.
 *
 * Runs in pino's worker thread. Each log line becomes one event whose record
 * is the pino object as is; its `time` (epoch ms) becomes the event time.
 * emitAsync() is used, so with overflow "block" the transport pushes back on
 * pino's stream instead of dropping.
 */
import build from "pino-abstract-transport";
import { type ClientOptions, NagareClient } from "./client";

export interface PinoTransportOptions extends Omit<ClientOptions, "onError"> {
  /** Tag of every event (default "pino"). */
  tag?: string;
  /** Take the tag from this field of the log object when it is a string. */
  tagKey?: string;
  /** How long closing the transport may take to deliver what is buffered (ms, default 10000). */
  closeTimeoutMs?: number;
}

export default async function nagareTransport(opts: PinoTransportOptions = {}) {
  const { tag = "pino", tagKey, closeTimeoutMs = 10_000, ...clientOptions } = opts;
  const client = new NagareClient({
    ...clientOptions,
    onError: (e) => process.emitWarning(e.message, "NagareTransportWarning"),
  });
  return build(
    async (source) => {
      for await (const obj of source as AsyncIterable<{ [k: string]: unknown }>) {
        const field = tagKey === undefined ? undefined : obj[tagKey];
        const t = typeof obj.time === "number" ? obj.time : undefined;
        await client.emitAsync(typeof field === "string" && field ? field : tag, obj, t);
      }
    },
    {
      async close() {
        await client.close(closeTimeoutMs);
      },
    },
  );
}
