// The HMR side of `make bench` (internal/bench's providers table): a server driven over
// stdin and stdout, one JSON line per request and per answer, so that the Go harness
// interleaves these rounds with its own in one run. Two pages of the same Vite + React app:
// one served by the dev sandbox through paddock's proxy, one by Vite run on the host.
//   {"op":"watch", color}  start waiting for the proxied page's h1 to have color, and answer
//   {"op":"seen"}  once it has: {"at": the wall clock in ms} (the harness wrote the file itself)
//   {"op":"init", base, user, pass, direct}  sign in, open both pages, each with HMR connected
//   {"op":"hmr", via, theme, color, token, sandbox, path, file, put_url}
//       write theme (through the file API for via "proxy", to file on the host for "direct",
//       by a PUT to put_url, which writes file, for "http"; on the host into place by a
//       rename, as the file API writes)
//       → the page's h1 has the computed color
// Answers are {"ms": …} (and put_ms, the file API's answer, for "proxy") or {"error": "…"}.
import { rename, writeFile } from 'node:fs/promises';
import readline from 'node:readline';
import { chromium } from 'playwright-core';

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  headless: true,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
const pages = {};
let watched;

// logs keeps each page's last console lines (Vite's HMR client says there what it does),
// for the error of an edit that never showed.
const logs = new Map();
function keepLog(page) {
  const lines = [];
  logs.set(page, lines);
  page.on('console', (m) => { lines.push(m.text()); if (lines.length > 20) lines.shift(); });
}

// state is what page shows and has logged lately, for an error.
async function state(page) {
  const now = await page.evaluate(() => [getComputedStyle(document.querySelector('h1')).color, document.visibilityState, location.href]).catch((e) => String(e));
  return `the page has ${JSON.stringify(now)}; its last console lines: ${JSON.stringify(logs.get(page) || [])}`;
}

// open goes to url and waits for the app and Vite's HMR client to say it is connected.
async function open(page, url) {
  keepLog(page);
  const connected = new Promise((resolve) => page.on('console', (m) => { if (m.text().includes('[vite] connected')) resolve(); }));
  await page.goto(url);
  await page.locator('h1').first().waitFor({ timeout: 60000 });
  let timer;
  const timeout = new Promise((_, reject) => { timer = setTimeout(() => reject(new Error(`no HMR connection on ${url}`)), 60000); });
  try {
    await Promise.race([connected, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

// shows resolves to the wall clock when page's h1 has color, polled each frame, or to the
// error of a wait that timed out.
function shows(page, color) {
  return page.waitForFunction((c) => getComputedStyle(document.querySelector('h1')).color === c, color, { polling: 'raf', timeout: 60000 })
    .then(() => Date.now(), (e) => e);
}

const ops = {
  async init(m) {
    const context = await browser.newContext({ baseURL: m.base, viewport: { width: 900, height: 700 } });
    const page = await context.newPage();
    await page.goto('/login');
    await page.getByLabel('Username').fill(m.user);
    await page.getByLabel('Password', { exact: true }).fill(m.pass);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.waitForURL((u) => u.pathname === '/', { timeout: 60000 });
    await page.goto('/login');
    await page.getByRole('button', { name: /switch to dev/i }).click();
    await page.waitForURL((u) => /^desktop-/.test(u.hostname), { timeout: 60000 });
    const me = await (await page.request.get(m.base + '/auth/session')).json();
    await open(page, `http://dev-${me.user.id}.localhost:${new URL(m.base).port}/`);
    pages.proxy = page;
    pages.direct = await context.newPage();
    await open(pages.direct, m.direct);
    return {};
  },
  async watch(m) {
    await pages.proxy.bringToFront();
    watched = shows(pages.proxy, m.color);
    return {};
  },
  async seen() {
    const at = await watched;
    if (at instanceof Error) throw new Error(`${at.message}; ${await state(pages.proxy)}`);
    return { at };
  },
  async hmr(m) {
    const page = pages[m.via === 'http' ? 'direct' : m.via];
    // A page in the background gets its animation frames throttled to about one a second:
    // the page timed is the one in front, as the user's would be.
    await page.bringToFront();
    // The page is watched from before the edit: it may show the change before the file
    // API has answered (the answer waits for the edit's checkpoint).
    const shown = shows(page, m.color);
    const t0 = Date.now();
    const epoch = performance.timeOrigin + performance.now();
    let put = 0;
    if (m.via === 'proxy' || m.via === 'http') {
      const url = m.via === 'proxy' ? `${m.base}/api/v1/sandboxes/${m.sandbox}/files/content?path=${m.path}` : m.put_url;
      const res = await fetch(url, { method: 'PUT', body: m.theme, headers: { Authorization: `Bearer ${m.token}` } });
      if (!res.ok) throw new Error(`PUT ${url}: ${res.status} ${await res.text()}`);
      put = Date.now() - t0;
    } else {
      // Into place by a rename, as paddock's file API writes: a write in place can be read
      // by Vite's watcher half done (truncated, then never again).
      const tmp = `${m.file}.${process.pid}.tmp`;
      await writeFile(tmp, m.theme);
      await rename(tmp, m.file);
    }
    const at = await shown;
    if (at instanceof Error) throw new Error(`edit via ${m.via} to ${m.color}: ${at.message}; ${await state(page)}`);
    return { ms: at - t0, put_ms: put, t0: epoch };
  },
};

const rl = readline.createInterface({ input: process.stdin });
for await (const line of rl) {
  const m = JSON.parse(line);
  let answer;
  try {
    answer = await ops[m.op](m);
  } catch (e) {
    answer = { error: String(e.stack || e) };
  }
  process.stdout.write(JSON.stringify(answer) + '\n');
}
await browser.close();
