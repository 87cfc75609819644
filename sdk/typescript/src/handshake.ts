/** Shared-key (and user/password) handshake of forward protocol v1: HELO, PING, PONG. */
import { createHash, randomBytes, timingSafeEqual } from "node:crypto";
import { Encoder } from "@msgpack/msgpack";

const encoder = new Encoder();

export interface Helo {
  nonce: Uint8Array;
  auth: Uint8Array;
  keepalive: boolean;
}

function bytesOf(v: unknown): Uint8Array {
  if (v instanceof Uint8Array) return v;
  if (typeof v === "string") return Buffer.from(v, "utf8");
  if (v === undefined || v === null) return new Uint8Array(0);
  throw new TypeError(`expected bytes, got ${typeof v}`);
}

function textOf(v: unknown): string {
  if (typeof v === "string") return v;
  if (v instanceof Uint8Array) return Buffer.from(v).toString("utf8");
  throw new TypeError(`expected text, got ${typeof v}`);
}

function sha512hex(...parts: (Uint8Array | string)[]): string {
  const h = createHash("sha512");
  for (const p of parts) h.update(p);
  return h.digest("hex");
}

/** Parse a HELO message (decoded with raw strings, so str nonces stay raw bytes). */
export function parseHelo(msg: unknown): Helo {
  if (!Array.isArray(msg) || msg.length < 2 || textOf(msg[0]) !== "HELO") {
    throw new Error("expected HELO from server");
  }
  const opts = msg[1] as { [k: string]: unknown };
  if (opts === null || typeof opts !== "object") throw new Error("HELO options must be a map");
  return { nonce: bytesOf(opts.nonce), auth: bytesOf(opts.auth), keepalive: opts.keepalive !== false };
}

/** hex(sha512(salt + client_hostname + nonce + shared_key)) */
export function pingDigest(salt: Uint8Array, clientHostname: string, nonce: Uint8Array, sharedKey: string): string {
  return sha512hex(salt, clientHostname, nonce, sharedKey);
}

/** hex(sha512(auth_salt + username + password)), "" when the server sent no auth salt. */
export function passwordDigest(authSalt: Uint8Array, username: string, password: string): string {
  if (authSalt.length === 0) return "";
  return sha512hex(authSalt, username, password);
}

/** hex(sha512(salt + server_hostname + nonce + shared_key)) */
export function pongDigest(salt: Uint8Array, serverHostname: string, nonce: Uint8Array, sharedKey: string): string {
  return sha512hex(salt, serverHostname, nonce, sharedKey);
}

/** A fresh shared-key salt: 32 lowercase hex characters (ASCII, so it travels as a msgpack str). */
export function newSalt(): Uint8Array {
  return Buffer.from(randomBytes(16).toString("hex"), "ascii");
}

export interface PingInput {
  helo: Helo;
  sharedKey: string;
  salt: Uint8Array;
  clientHostname: string;
  username?: string;
  password?: string;
}

/** The PING frame bytes: ["PING", hostname, salt, digest, username, password_digest]. */
export function encodePing(p: PingInput): Uint8Array {
  const useAuth = p.helo.auth.length > 0;
  const username = useAuth ? (p.username ?? "") : "";
  return encoder.encode([
    "PING",
    p.clientHostname,
    Buffer.from(p.salt).toString("utf8"),
    pingDigest(p.salt, p.clientHostname, p.helo.nonce, p.sharedKey),
    username,
    useAuth ? passwordDigest(p.helo.auth, username, p.password ?? "") : "",
  ]);
}

export interface Pong {
  authOk: boolean;
  reason: string;
  serverHostname: string;
  digest: string;
}

export function parsePong(msg: unknown): Pong {
  if (!Array.isArray(msg) || msg.length < 5 || textOf(msg[0]) !== "PONG") {
    throw new Error("expected PONG from server");
  }
  return {
    authOk: msg[1] === true,
    reason: textOf(msg[2] ?? ""),
    serverHostname: textOf(msg[3]),
    digest: textOf(msg[4]),
  };
}

/** Throws unless the PONG accepts us and proves the server knows the shared key. */
export function verifyPong(pong: Pong, salt: Uint8Array, nonce: Uint8Array, sharedKey: string): void {
  if (!pong.authOk) throw new Error(`handshake refused by server: ${pong.reason || "no reason given"}`);
  const expected = Buffer.from(pongDigest(salt, pong.serverHostname, nonce, sharedKey), "ascii");
  const got = Buffer.from(pong.digest, "ascii");
  if (expected.length !== got.length || !timingSafeEqual(expected, got)) {
    throw new Error("handshake failed: server's PONG digest does not match the shared key");
  }
}
