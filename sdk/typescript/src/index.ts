// @paddock/sdk: a TypeScript client of paddock's API (/api/v1). Its types are generated
// from api/openapi.yaml into schema.ts.

import { errorFromBody, errorOf } from "./errors.js";
import { ExecStream, type StreamStart } from "./exec.js";
import type { components } from "./schema.js";

export * from "./errors.js";
export { ExecStream, streamProtocol, type ExitStatus, type OutputEvent, type StreamStart } from "./exec.js";
export type { components, paths, operations } from "./schema.js";

type S = components["schemas"];
/** The API's description of a sandbox. */
export type SandboxInfo = S["Sandbox"];
export type Limits = S["Limits"];
export type FileInfo = S["FileInfo"];
export type History = S["History"];
export type Checkpoint = S["Checkpoint"];
export type CheckpointResult = S["CheckpointResult"];
export type RestoreResult = S["RestoreResult"];
export type Secret = S["Secret"];
export type RolesInfo = S["Roles"];
export type PromoteRequest = S["PromoteRequest"];
export type PromoteMode = NonNullable<PromoteRequest["mode"]>;
export type User = S["User"];

/**
 * SandboxSpec is what a new sandbox is made with: the API's CreateSandboxRequest, and
 * for short, its limits' memory, cpus, pids and disk at the top level.
 */
export type SandboxSpec = S["CreateSandboxRequest"] & Pick<Limits, "memory" | "cpus" | "pids" | "disk">;

/** Options of a Paddock client. */
export interface PaddockOptions {
  /** The server's base URL, e.g. http://127.0.0.1:8080. */
  url: string;
  /** An API token (pdk_…) or a capability token (pdk1.…). */
  token: string;
  /** The fetch to use (the global one by default). */
  fetch?: typeof fetch;
}

/** Options of a one-shot command. */
export interface RunOptions {
  env?: string[];
  cwd?: string;
  /** Bytes for stdin (at most 5 MiB; stream bigger input with exec). */
  stdin?: Uint8Array | string;
  timeoutMs?: number;
  /** Bound on each of stdout and stderr kept in the result. */
  maxOutputBytes?: number;
  signal?: AbortSignal;
}

/** The result of a one-shot command. */
export interface RunResult {
  exitCode: number;
  signal?: number;
  /** stdout and stderr as UTF-8 text; the bytes are in stdoutBytes and stderrBytes. */
  stdout: string;
  stderr: string;
  stdoutBytes: Uint8Array;
  stderrBytes: Uint8Array;
  stdoutTruncated: boolean;
  stderrTruncated: boolean;
  timedOut: boolean;
  /** The limit the command met (timeout, memory, pids, file_size, disk), if one. */
  limit?: string;
  /** Why it could not start (exit 126 or 127), or which limit it met. */
  error?: string;
}

/** Options of a streamed command. */
export interface ExecOptions {
  env?: string[];
  cwd?: string;
  /** Bytes for stdin, sent and then closed; without it stdin stays open (write, end). */
  stdin?: Uint8Array | string;
  signal?: AbortSignal;
}

/** Options of an interactive terminal. */
export interface PtyOptions {
  /** The program (a login shell by default: /bin/bash -l). */
  argv?: string[];
  rows?: number;
  cols?: number;
  env?: string[];
  cwd?: string;
  signal?: AbortSignal;
}

/** Paddock is a client of one paddock server, as one user. */
export class Paddock {
  readonly sandboxes: Sandboxes;
  readonly secrets: Secrets;
  /** @internal */
  readonly http: Http;

  constructor(opts: PaddockOptions) {
    if (!opts.url) throw new TypeError("Paddock: url is required");
    if (!opts.token) throw new TypeError("Paddock: token is required");
    this.http = new Http(opts.url, opts.token, opts.fetch ?? fetch);
    this.sandboxes = new Sandboxes(this.http);
    this.secrets = new Secrets(this.http);
  }

  /** me is the caller's account. */
  me(): Promise<User> {
    return this.http.json("GET", "/api/v1/me");
  }

  /** roles are the caller's live and dev sandboxes, made and started on first use. */
  async roles(): Promise<{ live: Sandbox; dev: Sandbox; generation: number }> {
    return this.rolesOf(await this.http.json<RolesInfo>("GET", "/api/v1/roles"));
  }

  /**
   * promote puts dev's work live and returns the roles after it. Mode "auto" (the default)
   * releases dev's packaged build into live when dev runs a provider's dev server and has
   * one, and swaps live and dev otherwise; "swap" and "release" force either. mode says
   * what was done, artifact what was released, and note what to know (a build older than
   * dev's workspace).
   */
  async promote(mode: PromoteMode = "auto"): Promise<{
    live: Sandbox; dev: Sandbox; generation: number; mode: string; artifact?: string; note?: string;
  }> {
    const body: PromoteRequest = { mode };
    const r = await this.http.json<RolesInfo>("POST", "/api/v1/promote", body);
    return { ...this.rolesOf(r), mode: r.mode ?? "swap", artifact: r.artifact, note: r.note };
  }

  private rolesOf(r: RolesInfo) {
    return { live: new Sandbox(this.http, r.live!), dev: new Sandbox(this.http, r.dev!), generation: r.generation ?? 0 };
  }
}

/** Sandboxes makes, lists and finds sandboxes. */
export class Sandboxes {
  /** @internal */
  constructor(private readonly http: Http) {}

  /** create makes and starts a sandbox. One that fails to start is returned with state failed. */
  async create(spec: SandboxSpec = {}): Promise<Sandbox> {
    const { memory, cpus, pids, disk, ...req } = spec;
    const limits = { ...req.limits, ...defined({ memory, cpus, pids, disk }) };
    const body = Object.keys(limits).length > 0 ? { ...req, limits } : req;
    return new Sandbox(this.http, await this.http.json<SandboxInfo>("POST", "/api/v1/sandboxes", body));
  }

  /** list returns the caller's sandboxes (an admin's, with all, everyone's). */
  async list(opts: { all?: boolean } = {}): Promise<Sandbox[]> {
    const q = opts.all ? "?all=true" : "";
    const l = await this.http.json<S["SandboxList"]>("GET", "/api/v1/sandboxes" + q);
    return (l.sandboxes ?? []).map((s) => new Sandbox(this.http, s));
  }

  /** get finds one sandbox by ID. */
  async get(id: string): Promise<Sandbox> {
    return new Sandbox(this.http, await this.http.json<SandboxInfo>("GET", sandboxPath(id)));
  }
}

/** Sandbox is one sandbox: its lifecycle, commands, files and history. */
export class Sandbox {
  readonly id: string;
  readonly files: Files;
  readonly history: HistoryClient;

  /** @internal */
  constructor(
    private readonly http: Http,
    /** What the API last said of the sandbox (refresh updates it). */
    public info: SandboxInfo,
  ) {
    if (!info.id) throw errorOf("internal", "the server answered a sandbox without an ID", 0);
    this.id = info.id;
    this.files = new Files(http, this.id);
    this.history = new HistoryClient(http, this.id);
  }

  /** state is the sandbox's state as last seen (creating, running, stopped, failed, lost). */
  get state(): string | undefined {
    return this.info.state;
  }

  /** refresh fetches the sandbox's description again. */
  async refresh(): Promise<this> {
    this.info = await this.http.json("GET", sandboxPath(this.id));
    return this;
  }

  /** stop stops the sandbox; its workspace stays. */
  stop(): Promise<this> {
    return this.lifecycle("stop");
  }

  /** start starts a stopped, failed or lost sandbox on its workspace. */
  start(): Promise<this> {
    return this.lifecycle("start");
  }

  /** restart stops and starts the sandbox. */
  restart(): Promise<this> {
    return this.lifecycle("restart");
  }

  /** delete destroys the sandbox with its workspace. */
  async delete(): Promise<void> {
    await this.http.call("DELETE", sandboxPath(this.id));
  }

  /** run runs a command to its end and returns its output and exit (bounded output). */
  async run(argv: string[], opts: RunOptions = {}): Promise<RunResult> {
    const req: S["ExecRequest"] = defined({
      argv,
      env: opts.env,
      cwd: opts.cwd,
      stdin: opts.stdin === undefined ? undefined : Buffer.from(opts.stdin).toString("base64"),
      timeout_ms: opts.timeoutMs,
      max_output_bytes: opts.maxOutputBytes,
    });
    const r = await this.http.json<S["ExecResult"]>("POST", sandboxPath(this.id, "/exec"), req, opts.signal);
    const out = Buffer.from(r.stdout ?? "", "base64");
    const err = Buffer.from(r.stderr ?? "", "base64");
    return {
      exitCode: r.exit_code ?? 0,
      signal: r.signal,
      stdout: out.toString("utf8"),
      stderr: err.toString("utf8"),
      stdoutBytes: out,
      stderrBytes: err,
      stdoutTruncated: r.stdout_truncated ?? false,
      stderrTruncated: r.stderr_truncated ?? false,
      timedOut: r.timed_out ?? false,
      limit: r.limit,
      error: r.error,
    };
  }

  /**
   * exec runs a command and streams its output:
   * `for await (const ev of sb.exec(["npm", "test"])) process.stdout.write(ev.data)`.
   */
  exec(argv: string[], opts: ExecOptions = {}): ExecStream {
    const s = this.stream({ argv, env: opts.env, cwd: opts.cwd }, opts.signal);
    if (opts.stdin !== undefined) {
      const stdin = opts.stdin;
      // A failure here is the stream's own, seen by its reader.
      s.write(stdin).then(() => s.end()).catch(() => {});
    }
    return s;
  }

  /** pty runs an interactive program on a terminal; write keystrokes, read its screen. */
  pty(opts: PtyOptions = {}): ExecStream {
    const start: StreamStart = {
      argv: opts.argv ?? ["/bin/bash", "-l"],
      env: opts.env,
      cwd: opts.cwd,
      tty: { rows: opts.rows ?? 24, cols: opts.cols ?? 80 },
    };
    return this.stream(start, opts.signal);
  }

  private stream(start: StreamStart, signal?: AbortSignal): ExecStream {
    return new ExecStream(this.http.url(sandboxPath(this.id, "/exec/stream")), this.http.auth(), defined(start), signal);
  }

  private async lifecycle(op: string): Promise<this> {
    this.info = await this.http.json("POST", sandboxPath(this.id, "/" + op));
    return this;
  }
}

/** Files reads and changes a sandbox's workspace. Paths are relative to /workspace, or absolute under it. */
export class Files {
  /** @internal */
  constructor(
    private readonly http: Http,
    private readonly id: string,
  ) {}

  /** read returns a file's bytes. */
  async read(path: string): Promise<Uint8Array> {
    const res = await this.http.call("GET", this.content(path));
    return new Uint8Array(await res.arrayBuffer());
  }

  /** readText returns a file's content as UTF-8 text. */
  async readText(path: string): Promise<string> {
    return new TextDecoder().decode(await this.read(path));
  }

  /** write replaces a file atomically (parents made); mode is octal, e.g. "644". */
  async write(path: string, data: Uint8Array | string, opts: { mode?: string } = {}): Promise<FileInfo> {
    const q = opts.mode ? "&mode=" + encodeURIComponent(opts.mode) : "";
    const body = typeof data === "string" ? new TextEncoder().encode(data) : data;
    const res = await this.http.call("PUT", this.content(path) + q, body, undefined, "application/octet-stream");
    return res.json() as Promise<FileInfo>;
  }

  /** list returns a directory's entries. */
  async list(path = "."): Promise<FileInfo[]> {
    const l = await this.http.json<S["FileList"]>("GET", sandboxPath(this.id, "/files/list?path=" + encodeURIComponent(path)));
    return l.entries ?? [];
  }

  /** remove removes a file or symlink, or with recursive a directory and what it holds. */
  async remove(path: string, opts: { recursive?: boolean } = {}): Promise<void> {
    await this.http.call("DELETE", this.content(path) + (opts.recursive ? "&recursive=true" : ""));
  }

  /** mkdir makes a directory (with parents, as mkdir -p); mode is octal, 755 by default. */
  mkdir(path: string, opts: { parents?: boolean; mode?: string } = {}): Promise<FileInfo> {
    return this.http.json("POST", sandboxPath(this.id, "/files/mkdir"), defined({ path, parents: opts.parents, mode: opts.mode }));
  }

  /** move renames a file, directory or symlink inside the workspace. */
  move(from: string, to: string, opts: { overwrite?: boolean } = {}): Promise<FileInfo> {
    return this.http.json("POST", sandboxPath(this.id, "/files/move"), defined({ from, to, overwrite: opts.overwrite }));
  }

  private content(path: string): string {
    return sandboxPath(this.id, "/files/content?path=" + encodeURIComponent(path));
  }
}

/** HistoryClient is a sandbox's workspace history: checkpoints, undo, redo, restore. */
export class HistoryClient {
  /** @internal */
  constructor(
    private readonly http: Http,
    private readonly id: string,
  ) {}

  /** list returns the timeline, newest first, and the checkpoint undo starts from. */
  list(): Promise<History> {
    return this.http.json("GET", sandboxPath(this.id, "/history"));
  }

  /** checkpoint records the workspace now; created is false when nothing changed. */
  checkpoint(message?: string): Promise<CheckpointResult> {
    return this.http.json("POST", sandboxPath(this.id, "/history/checkpoints"), defined({ message }));
  }

  /** undo restores the checkpoint before the current one and restarts the app. */
  undo(): Promise<RestoreResult> {
    return this.http.json("POST", sandboxPath(this.id, "/history/undo"));
  }

  /** redo takes back the last undo. */
  redo(): Promise<RestoreResult> {
    return this.http.json("POST", sandboxPath(this.id, "/history/redo"));
  }

  /** restore makes the workspace exactly a checkpoint's state. */
  restore(checkpoint: string): Promise<RestoreResult> {
    return this.http.json("POST", sandboxPath(this.id, "/history/restore"), { checkpoint });
  }
}

/** Secrets are the caller's secrets; their values can be set but are never read back. */
export class Secrets {
  /** @internal */
  constructor(private readonly http: Http) {}

  /** list returns the secrets' names and versions. */
  async list(): Promise<Secret[]> {
    return (await this.http.json<S["SecretList"]>("GET", "/api/v1/me/secrets")).secrets ?? [];
  }

  /** set sets a secret's value (a new version). */
  set(name: string, value: string): Promise<Secret> {
    return this.http.json("PUT", "/api/v1/me/secrets/" + encodeURIComponent(name), { value });
  }

  /** delete deletes a secret. */
  async delete(name: string): Promise<void> {
    await this.http.call("DELETE", "/api/v1/me/secrets/" + encodeURIComponent(name));
  }
}

/** @internal Http sends the API's requests and turns error answers into typed errors. */
export class Http {
  private readonly base: string;

  constructor(
    base: string,
    private readonly token: string,
    private readonly fetcher: typeof fetch,
  ) {
    this.base = base.replace(/\/+$/, "");
  }

  url(path: string): string {
    return this.base + path;
  }

  auth(): Record<string, string> {
    return { Authorization: "Bearer " + this.token };
  }

  async call(method: string, path: string, body?: string | Uint8Array, signal?: AbortSignal, type?: string): Promise<Response> {
    const headers: Record<string, string> = this.auth();
    if (type) headers["Content-Type"] = type;
    let res: Response;
    try {
      res = await this.fetcher(this.url(path), { method, headers, body, signal });
    } catch (e) {
      if (signal?.aborted) throw e;
      throw errorOf("unavailable", `${method} ${path}: ${e instanceof Error ? e.message : String(e)}`, 0);
    }
    if (!res.ok) throw errorFromBody(res.status, await res.text());
    return res;
  }

  async json<T>(method: string, path: string, body?: unknown, signal?: AbortSignal): Promise<T> {
    const res = await this.call(method, path, body === undefined ? undefined : JSON.stringify(body), signal, body === undefined ? undefined : "application/json");
    if (res.status === 204) return undefined as T;
    return (await res.json()) as T;
  }
}

function sandboxPath(id: string, rest = ""): string {
  return "/api/v1/sandboxes/" + encodeURIComponent(id) + rest;
}

// defined drops the undefined fields of o, so that the request carries only what was set.
function defined<T extends object>(o: T): T {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as T;
}
