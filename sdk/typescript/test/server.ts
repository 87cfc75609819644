/**
 * A scripted forward-protocol server for tests: it records every event, can
 * require the shared-key handshake, answer or withhold acks, drop its
 * connections, stop and come back on the same port.
 */
import { randomBytes } from "node:crypto";
import * as net from "node:net";
import * as tls from "node:tls";
import { Decoder, Encoder } from "@msgpack/msgpack";
import { type DecodedFrame, decodeFrameValue, extensionCodec } from "../src/codec";
import { pingDigest, pongDigest } from "../src/handshake";

export interface ServerOptions {
  /** UNIX socket path instead of TCP 127.0.0.1. */
  path?: string;
  /** TCP port to bind (0 = any free port). */
  port?: number;
  sharedKey?: string;
  /** Answer {"ack": id} for frames that carry a chunk id (default true). */
  ack?: boolean;
  /** Withhold the ack for the first N chunk ids seen (each id once). */
  withholdFirstAcks?: number;
  /** Serve TLS with this certificate and key (PEM). */
  tls?: { cert: string | Buffer; key: string | Buffer };
}

export interface Received {
  frame: DecodedFrame;
  at: number;
}

const encoder = new Encoder({ extensionCodec });

export class TestServer {
  readonly frames: Received[] = [];
  readonly connections: number[] = [];
  readonly chunkSeen = new Map<string, number>();
  private server: net.Server | undefined;
  private sockets = new Set<net.Socket>();
  private withheld = 0;
  port = 0;

  constructor(readonly opts: ServerOptions = {}) {}

  static async start(opts: ServerOptions = {}): Promise<TestServer> {
    const s = new TestServer(opts);
    await s.listen();
    return s;
  }

  /** All events received, in arrival order. */
  get events(): { tag: string; record: { [k: string]: unknown } }[] {
    return this.frames.flatMap((r) => r.frame.entries.map((e) => ({ tag: r.frame.tag, record: e.record })));
  }

  async listen(): Promise<void> {
    const server = this.opts.tls
      ? tls.createServer(this.opts.tls, (sock) => this.onConnection(sock))
      : net.createServer((sock) => this.onConnection(sock));
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      if (this.opts.path) server.listen(this.opts.path, resolve);
      else server.listen(this.port || this.opts.port || 0, "127.0.0.1", resolve);
    });
    if (!this.opts.path) this.port = (server.address() as net.AddressInfo).port;
    this.server = server;
  }

  /** Stop listening and close every connection (the client sees FIN). */
  async stop(): Promise<void> {
    const server = this.server;
    this.server = undefined;
    const sockets = [...this.sockets];
    this.sockets.clear();
    for (const s of sockets) s.end();
    const closing = server ? new Promise<void>((r) => server.close(() => r())) : Promise.resolve();
    setTimeout(() => {
      for (const s of sockets) s.destroy();
    }, 50).unref();
    await closing;
  }

  /** Close every connection but keep listening. */
  dropConnections(): void {
    for (const s of this.sockets) s.destroy();
    this.sockets.clear();
  }

  async waitForEvents(n: number, timeoutMs = 10_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (this.events.length < n) {
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${n} events, got ${this.events.length}`);
      await new Promise((r) => setTimeout(r, 10));
    }
  }

  private onConnection(sock: net.Socket): void {
    this.sockets.add(sock);
    this.connections.push(Date.now());
    sock.on("close", () => this.sockets.delete(sock));
    sock.on("error", () => {});
    const key = this.opts.sharedKey;
    const nonce = randomBytes(16);
    let authed = key === undefined;
    if (key !== undefined) {
      sock.write(encoder.encode(["HELO", { nonce, auth: new Uint8Array(0), keepalive: true }]));
    }
    const decoder = new Decoder({ extensionCodec });
    void (async () => {
      try {
        for await (const msg of decoder.decodeStream(sock)) {
          if (!authed) {
            const m = msg as unknown[];
            if (!Array.isArray(m) || m[0] !== "PING") throw new Error("expected PING");
            const hostname = m[1] as string;
            const salt = Buffer.from(m[2] as string, "utf8");
            if (m[3] !== pingDigest(salt, hostname, nonce, key as string)) {
              sock.write(encoder.encode(["PONG", false, "shared key mismatch", "", ""]));
              sock.end();
              return;
            }
            const digest = pongDigest(salt, "test-server", nonce, key as string);
            sock.write(encoder.encode(["PONG", true, "", "test-server", digest]));
            authed = true;
            continue;
          }
          const frame = decodeFrameValue(msg);
          this.frames.push({ frame, at: Date.now() });
          const chunk = frame.options.chunk;
          if (chunk !== undefined) {
            this.chunkSeen.set(chunk, (this.chunkSeen.get(chunk) ?? 0) + 1);
            if (this.opts.ack === false) continue;
            if (this.withheld < (this.opts.withholdFirstAcks ?? 0) && this.chunkSeen.get(chunk) === 1) {
              this.withheld++;
              continue;
            }
            sock.write(encoder.encode({ ack: chunk }));
          }
        }
      } catch {
        sock.destroy();
      }
    })();
  }
}

/** A TCP port on 127.0.0.1 where nothing listens (connections are refused). */
export async function refusedPort(): Promise<number> {
  const s = net.createServer();
  await new Promise<void>((r) => s.listen(0, "127.0.0.1", r));
  const port = (s.address() as net.AddressInfo).port;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}
