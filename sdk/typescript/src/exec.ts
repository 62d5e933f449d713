// The exec stream: a command's output as it comes, over the API's WebSocket protocol
// (subprotocol paddock.exec.v1; see internal/api/stream.go).

import { errorFromBody, errorOf, PaddockError, PermissionDeniedError } from "./errors.js";
import { connect, HandshakeError, type CloseInfo, type Conn, type Message } from "./websocket.js";

/** The WebSocket subprotocol of the exec stream. */
export const streamProtocol = "paddock.exec.v1";

/** OutputEvent is a piece of a command's output. */
export interface OutputEvent {
  stream: "stdout" | "stderr";
  data: Uint8Array;
}

/** ExitStatus is how a streamed command ended. */
export interface ExitStatus {
  exitCode: number;
  /** The signal that ended it, if one did. */
  signal?: number;
  /** The limit it met (timeout, memory, pids, file_size, disk), with error saying which. */
  limit?: string;
  /** Why it could not start (exit code 126 or 127), or the limit it met. */
  error?: string;
}

/** What the stream starts: the command, and a terminal for a PTY. */
export interface StreamStart {
  argv: string[];
  env?: string[];
  cwd?: string;
  tty?: { rows: number; cols: number };
}

// Past this many bytes of unread output the socket is paused until the reader has read
// half of them.
const highWater = 1 << 20;

/**
 * ExecStream is a running command. Iterate it (`for await (const ev of stream)`) for
 * its output; wait() resolves with its exit. write() and end() feed its stdin;
 * signal() and resize() control it. An error before the exit (the sandbox unknown,
 * the policy denying the command, a lost connection) rejects both.
 */
export class ExecStream implements AsyncIterable<OutputEvent> {
  private conn: Conn | null = null;
  private readonly opened: Promise<Conn>;
  private readonly queue: OutputEvent[] = [];
  private wake: (() => void) | null = null;
  private exit: ExitStatus | null = null;
  private failure: Error | null = null;
  private ended = false;
  private iterating = false;
  private buffered = 0;
  private paused = false;
  private readonly exited: Promise<ExitStatus>;
  private settle!: { resolve: (e: ExitStatus) => void; reject: (e: Error) => void };

  /** @internal Use Sandbox.exec or Sandbox.pty. */
  constructor(url: string, headers: Record<string, string>, start: StreamStart, signal?: AbortSignal) {
    this.exited = new Promise((resolve, reject) => (this.settle = { resolve, reject }));
    // wait() may never be called: its rejection must not be unhandled.
    this.exited.catch(() => {});
    this.opened = connect(url, streamProtocol, headers, signal).then(
      (c) => {
        this.conn = c;
        c.start(
          (m) => this.message(m),
          (ci) => this.closed(ci),
        );
        c.sendText(JSON.stringify(start));
        signal?.addEventListener("abort", () => c.destroy(), { once: true });
        return c;
      },
      (err: unknown) => {
        const e = err instanceof HandshakeError ? errorFromBody(err.status, err.body) : asError(err);
        this.fail(e);
        throw e;
      },
    );
    this.opened.catch(() => {});
  }

  /** bufferedBytes is the output received and not yet read (at most about 1 MiB more is read ahead). */
  get bufferedBytes(): number {
    return this.buffered;
  }

  /** write sends bytes (or a string, as UTF-8) to the command's stdin. */
  async write(data: Uint8Array | string): Promise<void> {
    const c = await this.opened;
    c.sendBinary(typeof data === "string" ? new TextEncoder().encode(data) : data);
  }

  /** end closes the command's stdin. */
  async end(): Promise<void> {
    (await this.opened).sendText(JSON.stringify({ type: "eof" }));
  }

  /** signal sends a signal (by number, e.g. 15 for SIGTERM) to the command. */
  async signal(sig: number): Promise<void> {
    (await this.opened).sendText(JSON.stringify({ type: "signal", signal: sig }));
  }

  /** resize changes a PTY's size. */
  async resize(rows: number, cols: number): Promise<void> {
    (await this.opened).sendText(JSON.stringify({ type: "resize", rows, cols }));
  }

  /** close drops the connection; the command is ended by the server. */
  close(): void {
    this.conn?.destroy();
  }

  /**
   * wait resolves with the command's exit. Called without an iterator reading the
   * output, it reads and drops the output itself.
   */
  async wait(): Promise<ExitStatus> {
    if (!this.iterating) {
      for await (const _ of this) {
        // dropped
      }
    }
    return this.exited;
  }

  /** collect reads the whole output and the exit (for commands with small output). */
  async collect(): Promise<{ stdout: string; stderr: string; exit: ExitStatus }> {
    const out: Record<"stdout" | "stderr", Uint8Array[]> = { stdout: [], stderr: [] };
    for await (const ev of this) out[ev.stream].push(ev.data);
    const text = (parts: Uint8Array[]) => Buffer.concat(parts).toString("utf8");
    return { stdout: text(out.stdout), stderr: text(out.stderr), exit: await this.exited };
  }

  async *[Symbol.asyncIterator](): AsyncIterator<OutputEvent> {
    if (this.iterating) throw new Error("an ExecStream is read by one iterator only");
    this.iterating = true;
    try {
      for (;;) {
        const ev = this.queue.shift();
        if (ev !== undefined) {
          this.buffered -= ev.data.length;
          if (this.paused && this.buffered < highWater / 2) {
            this.paused = false;
            this.conn?.resume();
          }
          yield ev;
          continue;
        }
        if (this.failure) throw this.failure;
        if (this.ended) return;
        await new Promise<void>((r) => (this.wake = r));
      }
    } finally {
      this.conn?.resume();
      // A reader that stops early ends the command: nobody reads what follows.
      if (!this.ended) this.close();
    }
  }

  private message(m: Message): void {
    if ("binary" in m) {
      const b = m.binary;
      if (b.length === 0) return;
      const stream = b[0] === 2 ? "stderr" : "stdout";
      this.queue.push({ stream, data: b.subarray(1) });
      this.buffered += b.length - 1;
      if (!this.paused && this.buffered >= highWater) {
        this.paused = true;
        this.conn?.pause();
      }
      this.notify();
      return;
    }
    try {
      const e = JSON.parse(m.text);
      if (e?.type === "exit") {
        this.exit = { exitCode: e.exit_code, signal: e.signal, limit: e.limit, error: e.error };
      }
    } catch {
      // An unknown text message is ignored: the protocol may grow.
    }
  }

  private closed(ci: CloseInfo): void {
    if (ci.code === 4403) {
      this.fail(new PermissionDeniedError("permission_denied", this.exit?.error || ci.reason, 403));
    } else if (ci.code === 4400) {
      this.fail(errorOf("invalid_argument", ci.reason, 400));
    } else if (this.exit) {
      this.ended = true;
      this.settle.resolve(this.exit);
      this.notify();
    } else {
      const why = ci.reason ? `: ${ci.reason}` : "";
      this.fail(errorOf("unavailable", `the exec stream closed before the command's exit (code ${ci.code}${why})`, 0));
    }
  }

  private fail(e: Error): void {
    if (this.ended) return;
    this.ended = true;
    this.failure = e;
    this.settle.reject(e);
    this.notify();
  }

  private notify(): void {
    const w = this.wake;
    this.wake = null;
    w?.();
  }
}

function asError(e: unknown): Error {
  if (e instanceof PaddockError) return e;
  const msg = e instanceof Error ? e.message : String(e);
  return errorOf("unavailable", `exec stream: ${msg}`, 0);
}
