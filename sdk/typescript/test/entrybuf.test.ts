import * as assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { test } from "node:test";
import { EventTime, encodeEntry, newEncoder } from "../src/codec";
import { EntryBuffer } from "../src/entrybuf";

const hex = (b: Uint8Array) => Buffer.from(b).toString("hex");
const fallback = newEncoder();

function fast(sec: number, nsec: number, record: unknown): string {
  const eb = new EntryBuffer(16);
  const n = eb.appendEntry(sec, nsec, record, fallback);
  assert.equal(n, eb.len);
  return hex(eb.buf.subarray(0, eb.len));
}

test("fast entry writer matches the shared vectors' entries_hex", () => {
  const file = path.resolve(__dirname, "..", "..", "..", "vectors", "vectors.json");
  const v = JSON.parse(fs.readFileSync(file, "utf8")) as {
    frames: { name: string; entries: { sec: number; nsec: number; record: unknown }[]; entries_hex: string }[];
  };
  for (const f of v.frames) {
    const eb = new EntryBuffer(16);
    for (const e of f.entries) eb.appendEntry(e.sec, e.nsec, e.record, fallback);
    assert.equal(hex(eb.buf.subarray(0, eb.len)), f.entries_hex, f.name);
    assert.equal(eb.count, f.entries.length);
  }
});

// A small deterministic PRNG so failures reproduce.
let seed = 12345;
function rnd(): number {
  seed = (seed * 1103515245 + 12345) & 0x7fffffff;
  return seed / 0x7fffffff;
}
const pick = <T>(xs: T[]): T => xs[Math.floor(rnd() * xs.length)] as T;
const CHARS = ["a", "Z", "0", " ", "é", "ß", "中", "文", "😀", "\u0000", "\n", "\u07ff", "\u0800", "\uffff"];

function randString(): string {
  const len = pick([0, 1, 5, 31, 32, 33, 100, 255, 256, 300]);
  const ascii = rnd() < 0.5;
  const parts: string[] = [];
  for (let i = 0; i < len; i++) parts.push(ascii ? String.fromCharCode(97 + (i % 26)) : pick(CHARS));
  return rnd() < 0.01 ? parts.join("").repeat(300) : parts.join("");
}

function randNumber(): number {
  return pick([
    0,
    -0,
    1,
    127,
    128,
    255,
    256,
    65535,
    65536,
    2 ** 32 - 1,
    2 ** 32,
    2 ** 53 - 1,
    2 ** 53,
    2 ** 60,
    -1,
    -32,
    -33,
    -128,
    -129,
    -32768,
    -32769,
    -(2 ** 31),
    -(2 ** 31) - 1,
    -(2 ** 53) + 1,
    -(2 ** 53),
    1.5,
    -0.25,
    Math.PI,
    1e-300,
    Number.NaN,
    Number.POSITIVE_INFINITY,
    Number.NEGATIVE_INFINITY,
    Math.floor(rnd() * 2 ** 40) - 2 ** 39,
  ]);
}

function randValue(depth: number): unknown {
  const r = rnd();
  if (depth > 2 || r < 0.3) return randString();
  if (r < 0.55) return randNumber();
  if (r < 0.6) return pick([true, false, null, undefined]);
  if (r < 0.8) return Array.from({ length: pick([0, 1, 3, 15, 16, 20]) }, () => randValue(depth + 2));
  return randRecord(depth + 1);
}

function randRecord(depth: number): { [k: string]: unknown } {
  const o: { [k: string]: unknown } = {};
  const n = depth > 1 ? pick([0, 1, 2]) : pick([0, 1, 2, 5, 15, 16, 17]);
  for (let i = 0; i < n; i++) o[`${pick(["k", "キー", "key_"])}${i}`] = randValue(depth);
  return o;
}

test("fast entry writer produces the same bytes as @msgpack/msgpack for random records", () => {
  for (let i = 0; i < 2000; i++) {
    const rec = randRecord(0);
    const sec = Math.floor(rnd() * 0xffffffff);
    const nsec = Math.floor(rnd() * 1e9);
    assert.equal(fast(sec, nsec, rec), hex(encodeEntry(new EventTime(sec, nsec), rec)), JSON.stringify(rec));
  }
});

test("Date is written as the library writes it: the msgpack timestamp extension", () => {
  for (const ms of [0, 1500, -1500, 1_700_000_000_000, 2 ** 32 * 1000, 2 ** 34 * 1000 + 7, -(2 ** 40)]) {
    const rec = { at: new Date(ms), n: 1 };
    assert.equal(fast(1, 2, rec), hex(encodeEntry(new EventTime(1, 2), rec)), `Date(${ms})`);
  }
});

test("bigint is written as the smallest int, int64 or uint64", () => {
  assert.equal(fast(1, 2, { b: 5n }), fast(1, 2, { b: 5 }));
  assert.equal(fast(1, 2, { b: -(2n ** 40n) }), fast(1, 2, { b: -(2 ** 40) }));
  assert.ok(fast(1, 2, { b: 2n ** 64n - 1n }).endsWith("a162cfffffffffffffffff"));
  assert.ok(fast(1, 2, { b: -(2n ** 63n) }).endsWith("a162d38000000000000000"));
});

test("a Map is a msgpack map of its entries, bigint and Date values included", () => {
  const m = new Map<unknown, unknown>([
    ["n", 5n],
    ["big", 2n ** 64n - 1n],
    ["at", new Date(1500)],
    [7, "seven"],
  ]);
  // the same bytes as the plain object with those keys and the values the fast path writes
  const asObject = fast(1, 2, { m: { n: 5, big: 2n ** 64n - 1n, at: new Date(1500), x: "seven" } });
  const asMap = fast(1, 2, { m });
  // "x" (a1 78) stands where the Map has the integer key 7 (07)
  assert.equal(asMap, asObject.replace("a178a5736576656e", "07a5736576656e"));
  assert.equal(fast(1, 2, { m: new Map() }), fast(1, 2, { m: {} }));
  const eb = new EntryBuffer(16);
  assert.throws(() => eb.appendEntry(1, 2, { m: new Map([["b", 2n ** 64n]]) }, fallback), RangeError);
});

test("values outside the fast path go through the library", () => {
  const cases: unknown[] = [
    { bin: new Uint8Array([1, 2, 3]) },
    { when: new EventTime(5, 6) },
    { nested: { arr: [new Uint8Array(0), { t: new EventTime(1, 2) }] } },
    Object.assign(Object.create(null), { nullProto: 1 }),
  ];
  for (const rec of cases) assert.equal(fast(1, 2, rec), hex(encodeEntry(new EventTime(1, 2), rec as never)));
  const eb = new EntryBuffer(16);
  assert.throws(() => eb.appendEntry(1, 2, { f: () => 1 }, fallback));
  assert.throws(() => eb.appendEntry(1, 2, { b: 2n ** 64n }, fallback), /does not fit in a 64-bit integer/);
  assert.throws(() => eb.appendEntry(1, 2, { b: -(2n ** 63n) - 1n }, fallback), RangeError);
  assert.throws(() => eb.appendEntry(1, 2, { d: new Date(NaN) }, fallback), /invalid Date/);
  assert.equal(eb.len, 0, "a failed entry leaves nothing behind");
  assert.equal(eb.count, 0);
  const deep: { [k: string]: unknown } = {};
  let cur = deep;
  for (let i = 0; i < 200; i++) {
    const next = {};
    cur.d = next;
    cur = next;
  }
  assert.throws(() => eb.appendEntry(1, 2, deep, fallback));
  assert.equal(eb.len, 0);
});
