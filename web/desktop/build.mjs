// Builds the desktop's page into internal/agent/desktop/dist, gzipped (the agent embeds
// and serves those files as they are). Reproducible: esbuild's output depends only on the
// sources and the pinned packages, and Node's gzip header carries no time or name.
import { build } from 'esbuild';
import { gzipSync } from 'node:zlib';
import { mkdirSync, readFileSync, writeFileSync, rmSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { dirname, join } from 'node:path';

const here = dirname(fileURLToPath(import.meta.url));
const out = join(here, '../../internal/agent/desktop/dist');

const res = await build({
  entryPoints: { desktop: join(here, 'src/main.js') },
  bundle: true,
  minify: true,
  format: 'iife',
  target: ['chrome110', 'firefox115', 'safari16'],
  legalComments: 'none',
  write: false,
  outdir: out,
  logLevel: 'warning',
});
rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });
const files = { 'index.html': readFileSync(join(here, 'src/index.html')) };
for (const f of res.outputFiles) files[f.path.slice(out.length + 1)] = f.contents;
let total = 0;
for (const [name, data] of Object.entries(files)) {
  const gz = gzipSync(data, { level: 9 });
  writeFileSync(join(out, name + '.gz'), gz);
  total += gz.length;
  console.log(`${name}: ${data.length} bytes, ${gz.length} gzipped`);
}
console.log(`total ${total} bytes gzipped`);
if (total > 400 * 1024) {
  console.error('the desktop is over its 400 KB (gzipped) budget');
  process.exit(1);
}
