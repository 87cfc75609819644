/**
 * winston transport:
 *
 *   new winston.transports.Stream(...)  ->  new NagareTransport({ tag: "app", port: 24224 })
 *
 * Each log entry (after winston's formats) becomes one event: the info
 * object's own string keys (level, message, metadata) are the record.
 */
import TransportStream from "winston-transport";
import { type ClientOptions, NagareClient } from "./client";

export interface NagareTransportOptions extends TransportStream.TransportStreamOptions, ClientOptions {
  /** Tag of every event (default "winston"). */
  tag?: string;
  /** Use an existing client instead of making one from the options. */
  client?: NagareClient;
  /** How long close() may take to deliver what is buffered (ms, default 10000). */
  closeTimeoutMs?: number;
}

export class NagareTransport extends TransportStream {
  readonly client: NagareClient;
  readonly tag: string;
  private readonly closeTimeoutMs: number;
  private readonly ownsClient: boolean;

  constructor(opts: NagareTransportOptions = {}) {
    const {
      tag = "winston",
      client,
      closeTimeoutMs = 10_000,
      format,
      level,
      silent,
      handleExceptions,
      handleRejections,
      ...clientOptions
    } = opts;
    super({ format, level, silent, handleExceptions, handleRejections });
    this.tag = tag;
    this.closeTimeoutMs = closeTimeoutMs;
    this.ownsClient = client === undefined;
    this.client = client ?? new NagareClient(clientOptions);
  }

  override log(info: { [k: string]: unknown }, callback: () => void): void {
    const record: { [k: string]: unknown } = {};
    for (const k of Object.keys(info)) record[k] = info[k];
    this.client.emitAsync(this.tag, record).then(() => {
      this.emit("logged", info);
      callback();
    });
  }

  override close(): void {
    if (!this.ownsClient) return;
    void this.client.close(this.closeTimeoutMs).then(() => this.emit("closed"));
  }
}

export default NagareTransport;
