// A small WebSocket client (RFC 6455) on node:http's upgrade. Node 20's global WebSocket
// is behind --experimental-websocket, and a browser-style WebSocket cannot send the
// Authorization header the API needs; this one does both, with no dependency.

import { createHash, randomBytes } from "node:crypto";
import * as http from "node:http";
import * as https from "node:https";
import type { Socket } from "node:net";

const GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/** A message received: text (a string) or binary (bytes). */
export type Message = { text: string } | { binary: Uint8Array };

/** How the server closed the connection. */
export interface CloseInfo {
  code: number;
  reason: string;
}

/** HandshakeError is a refused upgrade: the HTTP status and body the server answered. */
export class HandshakeError extends Error {
  constructor(
    readonly status: number,
    readonly body: string,
  ) {
    super(`websocket upgrade refused with HTTP ${status}`);
  }
}

/**
 * connect opens a WebSocket to url (http: or https:, or ws:/wss:) with the given
 * subprotocol and headers, and resolves once the server has accepted it.
 */
export function connect(
  url: string,
  protocol: string,
  headers: Record<string, string>,
  signal?: AbortSignal,
): Promise<Conn> {
  const u = new URL(url);
  u.protocol = u.protocol === "wss:" || u.protocol === "https:" ? "https:" : "http:";
  const key = randomBytes(16).toString("base64");
  const mod = u.protocol === "https:" ? https : http;
  const req = mod.request(u, {
    method: "GET",
    signal,
    headers: {
      ...headers,
      Connection: "Upgrade",
      Upgrade: "websocket",
      "Sec-WebSocket-Key": key,
      "Sec-WebSocket-Version": "13",
      "Sec-WebSocket-Protocol": protocol,
    },
  });
  return new Promise((resolve, reject) => {
    req.on("error", reject);
    req.on("response", (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => reject(new HandshakeError(res.statusCode ?? 0, Buffer.concat(chunks).toString("utf8"))));
      res.on("error", reject);
    });
    req.on("upgrade", (res, socket, head) => {
      const want = createHash("sha1").update(key + GUID).digest("base64");
      if (res.headers["sec-websocket-accept"] !== want) {
        socket.destroy();
        reject(new Error("websocket upgrade: the server's Sec-WebSocket-Accept does not match"));
        return;
      }
      if (res.headers["sec-websocket-protocol"] !== protocol) {
        socket.destroy();
        reject(new Error(`websocket upgrade: the server did not accept subprotocol ${protocol}`));
        return;
      }
      resolve(new Conn(socket as Socket, head));
    });
    req.end();
  });
}

/**
 * Conn is an open WebSocket. start attaches the handlers: messages arrive through
 * onMessage, in order; onClose is called once, with the server's close code, or 1006
 * when the connection dropped. Until start, what the server sends waits in the socket.
 */
export class Conn {
  private onMessage: (m: Message) => void = () => {};
  private onClose: (c: CloseInfo) => void = () => {};
  private buf: Buffer = Buffer.alloc(0);
  private frag: { opcode: number; parts: Buffer[] } | null = null;
  private closed = false;
  private closeSent = false;

  constructor(
    private readonly socket: Socket,
    private readonly head: Buffer,
  ) {
    socket.setNoDelay(true);
  }

  /** start delivers the server's messages and its close to the handlers. */
  start(onMessage: (m: Message) => void, onClose: (c: CloseInfo) => void): void {
    this.onMessage = onMessage;
    this.onClose = onClose;
    const lost = () => this.finish({ code: 1006, reason: "connection lost" });
    this.socket.on("close", lost);
    this.socket.on("error", lost);
    if (this.head.length > 0) this.receive(this.head);
    this.socket.on("data", (d: Buffer) => this.receive(d));
  }

  /** sendText sends one text message. */
  sendText(s: string): void {
    this.send(0x1, Buffer.from(s, "utf8"));
  }

  /** sendBinary sends one binary message. */
  sendBinary(b: Uint8Array): void {
    this.send(0x2, Buffer.from(b.buffer, b.byteOffset, b.byteLength));
  }

  /** close starts the closing handshake with code. */
  close(code = 1000, reason = ""): void {
    if (this.closeSent || this.closed) return;
    const r = Buffer.from(reason, "utf8").subarray(0, 123);
    const p = Buffer.alloc(2 + r.length);
    p.writeUInt16BE(code, 0);
    r.copy(p, 2);
    this.send(0x8, p);
    this.closeSent = true;
  }

  /** destroy drops the connection at once. */
  destroy(): void {
    this.socket.destroy();
  }

  /** pause and resume stop and restart reading from the server (flow control). */
  pause(): void {
    this.socket.pause();
  }
  resume(): void {
    this.socket.resume();
  }

  private send(opcode: number, payload: Buffer): void {
    if (this.closed || this.closeSent) return;
    const n = payload.length;
    const len = n < 126 ? 2 : n < 65536 ? 4 : 10;
    const h = Buffer.alloc(len + 4);
    h[0] = 0x80 | opcode;
    if (n < 126) {
      h[1] = 0x80 | n;
    } else if (n < 65536) {
      h[1] = 0x80 | 126;
      h.writeUInt16BE(n, 2);
    } else {
      h[1] = 0x80 | 127;
      h.writeBigUInt64BE(BigInt(n), 2);
    }
    // A client masks every frame (RFC 6455 section 5.3).
    const mask = randomBytes(4);
    mask.copy(h, len);
    const body = Buffer.alloc(n);
    for (let i = 0; i < n; i++) body[i] = payload[i] ^ mask[i & 3];
    this.socket.write(Buffer.concat([h, body]));
  }

  private receive(d: Buffer): void {
    this.buf = this.buf.length === 0 ? d : Buffer.concat([this.buf, d]);
    for (;;) {
      const f = parseFrame(this.buf);
      if (f === null) return;
      if (f instanceof Error) {
        this.close(1002, f.message);
        this.finish({ code: 1002, reason: f.message });
        this.socket.destroy();
        return;
      }
      this.buf = this.buf.subarray(f.size);
      this.frame(f.fin, f.opcode, f.payload);
      if (this.closed) return;
    }
  }

  private frame(fin: boolean, opcode: number, payload: Buffer): void {
    switch (opcode) {
      case 0x8: {
        const code = payload.length >= 2 ? payload.readUInt16BE(0) : 1005;
        const reason = payload.subarray(2).toString("utf8");
        this.close(code === 1005 ? 1000 : code);
        this.finish({ code, reason });
        this.socket.end();
        return;
      }
      case 0x9:
        this.send(0xa, payload);
        return;
      case 0xa:
        return;
    }
    if (opcode === 0x0) {
      if (this.frag === null) return this.fail("a continuation frame without a first one");
      this.frag.parts.push(payload);
    } else if (this.frag !== null) {
      return this.fail("a new message inside a fragmented one");
    } else {
      this.frag = { opcode, parts: [payload] };
    }
    if (!fin) return;
    const { opcode: op, parts } = this.frag;
    this.frag = null;
    const data = parts.length === 1 ? parts[0] : Buffer.concat(parts);
    if (op === 0x1) this.onMessage({ text: data.toString("utf8") });
    else if (op === 0x2) this.onMessage({ binary: data });
    else this.fail(`unknown opcode ${op}`);
  }

  private fail(why: string): void {
    this.close(1002, why);
    this.finish({ code: 1002, reason: why });
    this.socket.destroy();
  }

  private finish(c: CloseInfo): void {
    if (this.closed) return;
    this.closed = true;
    this.onClose(c);
  }
}

/** maxFrame bounds one frame from the server; the API's messages are far smaller. */
const maxFrame = 64 << 20;

/**
 * parseFrame reads one frame from the front of b: null when b holds only part of it,
 * an Error for a frame a server must not send.
 */
export function parseFrame(b: Buffer): { fin: boolean; opcode: number; payload: Buffer; size: number } | Error | null {
  if (b.length < 2) return null;
  const fin = (b[0] & 0x80) !== 0;
  if ((b[0] & 0x70) !== 0) return new Error("reserved bits set");
  const opcode = b[0] & 0x0f;
  if ((b[1] & 0x80) !== 0) return new Error("a masked frame from the server");
  let n = b[1] & 0x7f;
  let off = 2;
  if (n === 126) {
    if (b.length < 4) return null;
    n = b.readUInt16BE(2);
    off = 4;
  } else if (n === 127) {
    if (b.length < 10) return null;
    const big = b.readBigUInt64BE(2);
    if (big > BigInt(maxFrame)) return new Error("a frame over 64 MiB");
    n = Number(big);
    off = 10;
  }
  if (n > maxFrame) return new Error("a frame over 64 MiB");
  if (opcode >= 0x8 && (n > 125 || !fin)) return new Error("a control frame too long or fragmented");
  if (b.length < off + n) return null;
  return { fin, opcode, payload: b.subarray(off, off + n), size: off + n };
}
