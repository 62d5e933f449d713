// src/schema.ts is what openapi-typescript makes of api/openapi.yaml today: a change of
// the API description without `npm run generate` fails here.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");

test("src/schema.ts is generated from api/openapi.yaml", () => {
  const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8"));
  const dir = mkdtempSync(join(tmpdir(), "paddock-sdk-"));
  try {
    const out = join(dir, "schema.ts");
    // The same command as `npm run generate`, written elsewhere.
    const args = pkg.scripts.generate.split(" ").slice(1).map((a) => (a === "src/schema.ts" ? out : a));
    execFileSync(join(root, "node_modules", ".bin", "openapi-typescript"), args, { cwd: root, stdio: "pipe" });
    const want = readFileSync(out, "utf8");
    const have = readFileSync(join(root, "src", "schema.ts"), "utf8");
    assert.ok(have === want, "src/schema.ts is stale: run `npm run generate` in sdk/typescript");
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
