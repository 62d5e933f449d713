// The SDK against a real paddock server: the Go test TestTypeScriptSDK
// (internal/server/sdk_typescript_test.go) starts one and sets PADDOCK_URL and
// PADDOCK_TOKEN (a user's API token).
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import {
  ConflictError,
  InvalidArgumentError,
  NotFoundError,
  Paddock,
  PaddockError,
  PermissionDeniedError,
  UnauthenticatedError,
} from "../dist/index.js";

const url = process.env.PADDOCK_URL;
const token = process.env.PADDOCK_TOKEN;
if (!url || !token) throw new Error("PADDOCK_URL and PADDOCK_TOKEN are not set: run through go test -run TestTypeScriptSDK ./internal/server");

const pd = new Paddock({ url, token });
let sb;

before(async () => {
  sb = await pd.sandboxes.create({ name: "sdk", memory: "512M" });
  assert.equal(sb.state, "running", `the new sandbox: ${JSON.stringify(sb.info)}`);
});
after(async () => {
  await sb?.delete();
});

// readUntil reads an exec stream's stdout until it holds want; it returns what it read.
async function readUntil(it, want) {
  let got = "";
  while (!got.includes(want)) {
    const { value, done } = await it.next();
    if (done) throw new Error(`the stream ended before ${JSON.stringify(want)}; read ${JSON.stringify(got)}`);
    got += Buffer.from(value.data).toString("utf8");
  }
  return got;
}

describe("sandboxes", () => {
  test("create sets the limits; get and list find it", async () => {
    assert.equal(sb.info.limits?.memory_bytes, 512 << 20);
    const got = await pd.sandboxes.get(sb.id);
    assert.equal(got.id, sb.id);
    assert.equal(got.info.name, "sdk");
    const all = await pd.sandboxes.list();
    assert.ok(all.some((s) => s.id === sb.id), "list holds the new sandbox");
  });

  test("stop, start and delete; a deleted sandbox is NotFoundError", async () => {
    const other = await pd.sandboxes.create({ name: "sdk-lifecycle" });
    assert.equal((await other.stop()).state, "stopped");
    await assert.rejects(other.run(["true"]), ConflictError, "exec in a stopped sandbox");
    assert.equal((await other.start()).state, "running");
    assert.equal((await other.run(["echo", "back"])).stdout, "back\n");
    await other.delete();
    await assert.rejects(pd.sandboxes.get(other.id), (e) => e instanceof NotFoundError && e.status === 404 && e.code === "not_found");
    await assert.rejects(other.exec(["true"]).wait(), NotFoundError, "the exec stream of a deleted sandbox");
  });

  test("an unknown token is UnauthenticatedError", async () => {
    const bad = new Paddock({ url, token: "pdk_notarealtoken" });
    await assert.rejects(bad.sandboxes.list(), UnauthenticatedError);
    await assert.rejects(bad.me(), (e) => e instanceof PaddockError && e.status === 401);
  });
});

describe("exec", () => {
  test("run returns stdout, stderr and the exit code apart; stdin is passed", async () => {
    const r = await sb.run(["sh", "-c", "cat; echo err >&2; exit 3"], { stdin: "in\n" });
    assert.equal(r.exitCode, 3);
    assert.equal(r.stdout, "in\n");
    assert.equal(r.stderr, "err\n");
    assert.equal(r.timedOut, false);
  });

  test("run names the limit a command met", async () => {
    const r = await sb.run(["sleep", "30"], { timeoutMs: 200 });
    assert.equal(r.timedOut, true);
    assert.equal(r.limit, "timeout");
  });

  test("run with bad input is InvalidArgumentError naming it", async () => {
    await assert.rejects(sb.run([]), (e) => e instanceof InvalidArgumentError && /argv/.test(e.message));
  });

  test("exec streams stdout and stderr apart, then the exit", async () => {
    const s = sb.exec(["sh", "-c", "echo out; echo err >&2; exit 7"]);
    const { stdout, stderr, exit } = await s.collect();
    assert.equal(stdout, "out\n");
    assert.equal(stderr, "err\n");
    assert.equal(exit.exitCode, 7);
  });

  test("exec output arrives while the command runs, and stdin is written to it", async () => {
    // The command waits for a line that the test sends only after reading "ready":
    // the first output came before the command's end.
    const s = sb.exec(["sh", "-c", "echo ready; read x; echo got $x"]);
    const it = s[Symbol.asyncIterator]();
    await readUntil(it, "ready\n");
    await s.write("line\n");
    assert.match(await readUntil(it, "got line\n"), /got line/);
    assert.deepEqual(await it.next(), { value: undefined, done: true });
    assert.equal((await s.wait()).exitCode, 0);
  });

  test("exec passes stdin from the options and closes it", async () => {
    const big = "x".repeat(300000) + "\n";
    const { stdout, exit } = await sb.exec(["wc", "-c"], { stdin: big }).collect();
    assert.equal(stdout.trim(), String(big.length));
    assert.equal(exit.exitCode, 0);
  });

  test("exec of a missing program exits 127 with the reason", async () => {
    const exit = await sb.exec(["/no/such/program"]).wait();
    assert.equal(exit.exitCode, 127);
    assert.ok(exit.error, "the exit says why");
  });

  test("a signal ends a streamed command", async () => {
    const s = sb.exec(["sh", "-c", "echo up; exec sleep 60"]);
    const it = s[Symbol.asyncIterator]();
    await readUntil(it, "up\n");
    await s.signal(15);
    const exit = await s.wait();
    assert.equal(exit.signal, 15, JSON.stringify(exit));
  });

  test("output past the read-ahead waits for the reader, then arrives whole and in order", { timeout: 120000 }, async () => {
    const s = sb.exec(["seq", "1", "2000000"]); // about 14 MiB
    // Read nothing until the stream holds its read-ahead (1 MiB): it stops reading there.
    const deadline = Date.now() + 60000;
    while (s.bufferedBytes < 1 << 20) {
      assert.ok(Date.now() < deadline, `the stream buffered only ${s.bufferedBytes} bytes`);
      await new Promise((r) => setTimeout(r, 20));
    }
    let text = "";
    for await (const ev of s) text += Buffer.from(ev.data).toString("latin1");
    const lines = text.trimEnd().split("\n");
    assert.equal(lines.length, 2000000);
    const wrong = lines.findIndex((l, i) => l !== String(i + 1));
    assert.equal(wrong, -1, `line ${wrong + 1} is ${JSON.stringify(lines[wrong])}`);
    assert.equal((await s.wait()).exitCode, 0);
  });

  test("a command the sandbox's policy denies is PermissionDeniedError naming the rule", async () => {
    const policy = `${url}/api/v1/sandboxes/${sb.id}/policy`;
    const auth = { Authorization: `Bearer ${token}` };
    const put = await fetch(policy, { method: "PUT", headers: auth, body: 'shell: {deny: ["rm *"]}\n' });
    assert.equal(put.status, 200, await put.text());
    try {
      await assert.rejects(sb.exec(["rm", "x"]).wait(), (e) => e instanceof PermissionDeniedError && /shell\.deny/.test(e.message));
      await assert.rejects(sb.run(["rm", "x"]), PermissionDeniedError);
    } finally {
      const del = await fetch(policy, { method: "DELETE", headers: auth });
      assert.ok(del.ok, `detach the policy: ${del.status}`);
    }
  });

  test("pty: a terminal of the asked size, resized", async () => {
    const s = sb.pty({ argv: ["sh", "-c", "stty size; read x; stty size"], rows: 30, cols: 100 });
    const it = s[Symbol.asyncIterator]();
    await readUntil(it, "30 100");
    await s.resize(40, 120);
    await s.write("\n");
    await readUntil(it, "40 120");
    await it.return();
  });
});

describe("files", () => {
  test("write, read, list, mkdir, move, remove", async () => {
    const info = await sb.files.write("src/hello.txt", "hello\n", { mode: "600" });
    assert.equal(info.size, 6);
    assert.equal(await sb.files.readText("src/hello.txt"), "hello\n");
    const bytes = new Uint8Array([0, 1, 2, 255]);
    await sb.files.write("bin.dat", bytes);
    assert.deepEqual(await sb.files.read("bin.dat"), bytes);

    await sb.files.mkdir("a/b/c", { parents: true });
    await sb.files.move("src/hello.txt", "a/b/c/hi.txt");
    const names = (await sb.files.list("a/b/c")).map((f) => f.name);
    assert.deepEqual(names, ["hi.txt"]);
    await sb.files.remove("a", { recursive: true });
    await assert.rejects(sb.files.list("a"), NotFoundError);
  });

  test("errors are typed and precise", async () => {
    await assert.rejects(sb.files.read("no-such-file"), NotFoundError);
    await sb.files.mkdir("d");
    await assert.rejects(sb.files.mkdir("d"), ConflictError, "mkdir of an existing directory without parents");
    await assert.rejects(sb.files.read("../etc/passwd"), InvalidArgumentError, "a path that leaves the workspace");
    await assert.rejects(sb.files.mkdir("e", { mode: "4755" }), (e) => e instanceof InvalidArgumentError && /mode/.test(e.message));
  });
});

describe("history", () => {
  test("checkpoint, undo, redo, restore", async () => {
    await sb.files.write("h.txt", "one");
    const one = await sb.history.checkpoint("one");
    await sb.files.write("h.txt", "two");
    const h = await sb.history.list();
    assert.ok(h.checkpoints?.length >= 2, "the history has the checkpoints");
    assert.equal(h.checkpoints[0].id, h.current, "newest first, the current one");

    await sb.history.undo();
    assert.equal(await sb.files.readText("h.txt"), "one");
    await sb.history.redo();
    assert.equal(await sb.files.readText("h.txt"), "two");
    const r = await sb.history.restore(one.checkpoint.id);
    assert.ok(r.checkpoint?.id, "restore answers its checkpoint");
    assert.equal(await sb.files.readText("h.txt"), "one");
    await assert.rejects(sb.history.restore("9999"), NotFoundError);
  });
});

describe("secrets", () => {
  test("set, list names without values, delete", async () => {
    const s = await pd.secrets.set("sdk-token", "s3cret-value");
    assert.equal(s.name, "sdk-token");
    const list = await pd.secrets.list();
    const got = list.find((x) => x.name === "sdk-token");
    assert.ok(got, "listed");
    assert.ok(!JSON.stringify(list).includes("s3cret-value"), "no value is ever answered");
    await pd.secrets.delete("sdk-token");
    assert.ok(!(await pd.secrets.list()).some((x) => x.name === "sdk-token"));
    await assert.rejects(pd.secrets.delete("sdk-token"), NotFoundError);
    await assert.rejects(pd.secrets.set("bad name!", "v"), InvalidArgumentError);
  });
});

describe("roles", () => {
  test("roles and promote swap live and dev", async () => {
    const r = await pd.roles();
    assert.notEqual(r.live.id, r.dev.id);
    const p = await pd.promote();
    assert.equal(p.mode, "swap");
    assert.equal(p.live.id, r.dev.id);
    assert.equal(p.dev.id, r.live.id);
    assert.ok(p.generation > r.generation);
    assert.equal((await p.live.run(["echo", "live"])).stdout, "live\n");
  });
  test("promote release without a packaged build is a conflict", async () => {
    await assert.rejects(pd.promote("release"), ConflictError);
  });
});
