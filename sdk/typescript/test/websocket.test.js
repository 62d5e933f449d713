// The WebSocket client's frame parser: every frame shape a server may send, and no
// input that throws (the parser reads a remote server's bytes).
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { test } from "node:test";

import { parseFrame } from "../dist/websocket.js";

test("frames of each length encoding parse; a partial one waits", () => {
  for (const n of [0, 5, 125, 126, 65535, 65536]) {
    const payload = randomBytes(n);
    const head = n < 126 ? Buffer.from([0x82, n]) : n < 65536 ? Buffer.from([0x82, 126, n >> 8, n & 255]) : Buffer.concat([Buffer.from([0x82, 127]), bigLen(n)]);
    const frame = Buffer.concat([head, payload, Buffer.from([0x81])]);
    const f = parseFrame(frame);
    assert.ok(f && !(f instanceof Error), `length ${n}`);
    assert.equal(f.opcode, 2);
    assert.equal(f.fin, true);
    assert.equal(f.size, head.length + n);
    assert.ok(Buffer.from(f.payload).equals(payload));
    assert.equal(parseFrame(frame.subarray(0, 1)), null, "one byte");
    assert.equal(parseFrame(frame.subarray(0, head.length - 1)), null, "part of the header");
    if (n > 0) assert.equal(parseFrame(frame.subarray(0, head.length + n - 1)), null, "part of the payload");
  }
});

test("frames a server must not send are errors", () => {
  assert.ok(parseFrame(Buffer.from([0x81, 0x85, 1, 2, 3, 4, 0])) instanceof Error, "masked");
  assert.ok(parseFrame(Buffer.from([0xc1, 0])) instanceof Error, "reserved bit");
  assert.ok(parseFrame(Buffer.concat([Buffer.from([0x88, 126, 0, 200]), Buffer.alloc(200)])) instanceof Error, "long control frame");
  assert.ok(parseFrame(Buffer.concat([Buffer.from([0x82, 127]), bigLen(2 ** 40)])) instanceof Error, "a huge length");
});

test("random bytes never throw", () => {
  for (let i = 0; i < 20000; i++) {
    const b = randomBytes(1 + (i % 40));
    const f = parseFrame(b);
    if (f && !(f instanceof Error)) assert.ok(f.size <= b.length);
  }
});

function bigLen(n) {
  const b = Buffer.alloc(8);
  b.writeBigUInt64BE(BigInt(n));
  return b;
}
