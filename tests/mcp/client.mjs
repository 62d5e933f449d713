// Drives paddock's MCP server with the TypeScript SDK's client, a published third-party
// MCP client, and prints what it got as one JSON document for the Go test to check.
//
// usage: node client.mjs '{"transport":"http","url":"…/mcp","token":"…"}'
//        node client.mjs '{"transport":"stdio","command":"…","args":["mcp"],"env":{…}}'
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const cfg = JSON.parse(process.argv[2]);
const transport =
  cfg.transport === "http"
    ? new StreamableHTTPClientTransport(new URL(cfg.url), {
        requestInit: { headers: { Authorization: `Bearer ${cfg.token}` } },
      })
    : new StdioClientTransport({ command: cfg.command, args: cfg.args, env: { ...process.env, ...cfg.env }, stderr: "inherit" });

const client = new Client({ name: "paddock-tests", version: "1.0.0" });
client.onerror = (e) => process.stderr.write(`client error: ${e}\n`);
await client.connect(transport);

const out = { server: client.getServerVersion(), tools: [], calls: [], progress: [] };
out.tools = (await client.listTools()).tools.map((t) => ({ name: t.name, required: t.inputSchema.required ?? [] }));

async function call(name, args) {
  const r = await client.callTool({ name, arguments: args }, undefined, {
    onprogress: (p) => out.progress.push(p.message ?? ""),
    timeout: 120_000,
  });
  const text = r.content.filter((c) => c.type === "text").map((c) => c.text).join("");
  out.calls.push({ name, isError: r.isError === true, text, structured: r.structuredContent ?? null });
  return r;
}

// Every tool once, in an order where each has something to act on, then errors.
const created = await call("create_sandbox", {});
const id = created.structuredContent.sandbox.id;
await call("list_sandboxes", {});
await call("write_file", { sandbox: id, path: "hello.txt", content: "hello from node\n" });
await call("edit_file", { sandbox: id, path: "hello.txt", old_string: "node", new_string: "the TypeScript SDK" });
await call("read_file", { sandbox: id, path: "hello.txt" });
await call("list_files", { sandbox: id });
await call("run_command", { sandbox: id, argv: ["sh", "-c", "cat hello.txt; exit 7"] });
const cp = await call("checkpoint", { sandbox: id, message: "the greeting" });
await call("move_file", { sandbox: id, from: "hello.txt", to: "greeting.txt" });
await call("history", { sandbox: id, limit: 5 });
await call("undo", { sandbox: id });
await call("redo", { sandbox: id });
await call("remove_file", { sandbox: id, path: "greeting.txt" });
await call("restore", { sandbox: id, checkpoint: cp.structuredContent.checkpoint.id });
await call("app_status", { sandbox: id });
await call("stop_sandbox", { sandbox: id });
await call("run_command", { sandbox: id, argv: ["true"] });
await call("restart_sandbox", { sandbox: id });
await call("edit_file", { sandbox: id, path: "hello.txt", old_string: "absent", new_string: "x" });
await call("run_command", { sandbox: id, argv: "not an array" });
await call("list_files", { sandbox: "sb-aaaaaaaaaa" });
const res = await client.readResource({ uri: `paddock://sandboxes/${id}/files/hello.txt` });
out.resource = res.contents[0].text;
await call("delete_sandbox", { sandbox: id });
await client.close();
process.stdout.write(JSON.stringify(out));
