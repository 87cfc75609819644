import * as assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { describe, test } from "node:test";
import { gunzipSync } from "node:zlib";
import { Decoder } from "@msgpack/msgpack";
import {
  decodeFrame,
  type Entry,
  EventTime,
  encodeEntries,
  encodeFrame,
  extensionCodec,
  type FrameMode,
} from "../src/codec";
import { encodePing, parseHelo, parsePong, passwordDigest, pingDigest, pongDigest, verifyPong } from "../src/handshake";

// dist-test/test/vectors.test.js -> sdk/vectors/vectors.json
const VECTORS = path.resolve(__dirname, "..", "..", "..", "vectors", "vectors.json");

interface VEntry {
  sec: number;
  nsec: number;
  record: { [k: string]: unknown };
}
interface VFrame {
  name: string;
  mode: FrameMode;
  tag: string;
  entries: VEntry[];
  options: { chunk?: string };
  hex: string;
  entries_hex: string;
}
interface VHandshake {
  shared_key: string;
  shared_key_salt_hex: string;
  client_hostname: string;
  server_hostname: string;
  nonce_hex: string;
  auth_salt_hex: string;
  username: string;
  password: string;
  ping_digest: string;
  password_digest: string;
  pong_digest: string;
  helo_hex: string;
  ping_hex: string;
  pong_hex: string;
}
interface Vectors {
  event_time: { sec: number; nsec: number; hex: string }[];
  frames: VFrame[];
  handshake: VHandshake[];
}

const vectors = JSON.parse(fs.readFileSync(VECTORS, "utf8")) as Vectors;
const hex = (b: Uint8Array) => Buffer.from(b).toString("hex");
const unhex = (s: string) => new Uint8Array(Buffer.from(s, "hex"));
const toEntries = (es: VEntry[]): Entry[] => es.map((e) => ({ time: new EventTime(e.sec, e.nsec), record: e.record }));
const plain = (es: Entry[]) => es.map((e) => ({ sec: e.time.sec, nsec: e.time.nsec, record: e.record }));
const rawDecoder = new Decoder({ extensionCodec, rawStrings: true });

describe("vectors", () => {
  test("file has every section", () => {
    assert.ok(vectors.event_time.length > 0);
    assert.ok(vectors.frames.length > 0);
    assert.ok(vectors.handshake.length > 0);
    for (const mode of ["message", "forward", "packed", "compressed"]) {
      assert.ok(
        vectors.frames.some((f) => f.mode === mode),
        `no ${mode} vector`,
      );
    }
  });

  test("event_time encodes and decodes", () => {
    for (const v of vectors.event_time) {
      const t = new EventTime(v.sec, v.nsec);
      const bytes = encodeEntries([{ time: t, record: {} }]);
      // [time, {}] = 0x92 + ext + 0x80
      assert.equal(hex(bytes.subarray(1, 11)), v.hex, `${v.sec}/${v.nsec}`);
      const back = EventTime.fromBytes(unhex(v.hex).subarray(2));
      assert.deepEqual([back.sec, back.nsec], [v.sec, v.nsec]);
    }
  });

  for (const v of vectors.frames) {
    test(`frame ${v.name}`, () => {
      const entries = toEntries(v.entries);
      assert.equal(hex(encodeEntries(entries)), v.entries_hex, "entries_hex");
      const mine = encodeFrame(v.mode, v.tag, entries, v.options);
      if (v.mode !== "compressed") {
        assert.equal(hex(mine), v.hex, "frame bytes");
      } else {
        const d = decodeFrame(mine);
        assert.equal(d.mode, "compressed");
        assert.equal(d.tag, v.tag);
        assert.equal(hex(d.entriesBytes), v.entries_hex);
        assert.deepEqual(d.options, { size: v.entries.length, ...v.options, compressed: "gzip" });
        assert.deepEqual(Object.keys(d.options), ["size", ...Object.keys(v.options), "compressed"]);
        // the vector's own gzip payload gunzips to entries_hex
        const raw = rawDecoder.decode(unhex(v.hex)) as unknown[];
        assert.equal(hex(gunzipSync(raw[1] as Uint8Array)), v.entries_hex);
      }
      const back = decodeFrame(unhex(v.hex));
      assert.equal(back.mode, v.mode);
      assert.equal(back.tag, v.tag);
      assert.deepEqual(plain(back.entries), v.entries);
      assert.equal(hex(back.entriesBytes), v.entries_hex);
      const { size, compressed, ...rest } = back.options;
      assert.deepEqual(rest, v.options);
      if (v.mode === "packed" || v.mode === "compressed") assert.equal(size, v.entries.length);
      else assert.equal(size, undefined);
      assert.equal(compressed, v.mode === "compressed" ? "gzip" : undefined);
    });
  }

  for (const [i, h] of vectors.handshake.entries()) {
    test(`handshake ${i} (${h.client_hostname})`, () => {
      const salt = unhex(h.shared_key_salt_hex);
      const nonce = unhex(h.nonce_hex);
      const auth = unhex(h.auth_salt_hex);
      assert.equal(pingDigest(salt, h.client_hostname, nonce, h.shared_key), h.ping_digest);
      assert.equal(passwordDigest(auth, h.username, h.password), h.password_digest);
      assert.equal(pongDigest(salt, h.server_hostname, nonce, h.shared_key), h.pong_digest);

      const helo = parseHelo(rawDecoder.decode(unhex(h.helo_hex)));
      assert.equal(hex(helo.nonce), h.nonce_hex);
      assert.equal(hex(helo.auth), h.auth_salt_hex);

      const ping = encodePing({
        helo,
        sharedKey: h.shared_key,
        salt,
        clientHostname: h.client_hostname,
        username: h.username,
        password: h.password,
      });
      assert.equal(hex(ping), h.ping_hex);

      const pong = parsePong(rawDecoder.decode(unhex(h.pong_hex)));
      assert.equal(pong.serverHostname, h.server_hostname);
      verifyPong(pong, salt, nonce, h.shared_key);
      const bad = unhex(h.pong_hex);
      const last = bad.length - 1;
      bad[last] = (bad[last] as number) === 0x30 ? 0x31 : 0x30;
      assert.throws(() => verifyPong(parsePong(rawDecoder.decode(bad)), salt, nonce, h.shared_key), /digest/);
    });
  }
});
