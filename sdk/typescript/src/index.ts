export type { ClientOptions, ClientStats, Overflow, ServerAddress } from "./client";
export { NagareClient } from "./client";
export type { DecodedFrame, Entry, FrameMode, FrameOptions, Record } from "./codec";
export {
  decodeEntries,
  decodeFrame,
  decodeFrameValue,
  EventTime,
  encodeCompressedFrame,
  encodeEntries,
  encodeEntry,
  encodeFrame,
  encodePackedFrame,
  extensionCodec,
} from "./codec";
export type { Helo, Pong } from "./handshake";
export { encodePing, parseHelo, parsePong, passwordDigest, pingDigest, pongDigest, verifyPong } from "./handshake";
