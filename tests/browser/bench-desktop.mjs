// The desktop's browser side of `make bench` (internal/bench's desktop table): a server
// driven over stdin and stdout, one JSON line per request and per answer, so that the Go
// harness interleaves these rounds with its own baselines in one run. Every time is taken
// in the page's or this process's clock, from the person's action to what they see.
//   {"op":"init", base, user, pass, sandbox, marker}  sign in once, open a terminal
//   {"op":"welcome"}   a fresh sign-in whose landing is sent to the app: the welcome page
//   {"op":"desktop"}   a fresh sign-in landing on the desktop, until it is interactive
//   {"op":"key", key}  one keystroke in the terminal → its echo on the page's WebSocket
//   {"op":"undo", want} click Undo, then the Preview tab → the frame shows want
//   {"op":"reload", want} reload the app's own tab until it shows want
//   {"op":"static", url} a fresh page on url (the same bundle from a plain file server) → loaded
// Answers are {"ms": …} (and bytes, session) or {"error": "…"}.
import readline from 'node:readline';
import { chromium } from 'playwright-core';

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  headless: true,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
let cfg;
let desk; // the kept desktop page of init
let appTab; // the app's host in a tab of its own, beside desk, signed in

async function signIn(page) {
  await page.goto('/login');
  await page.getByLabel('Username').fill(cfg.user);
  await page.getByLabel('Password', { exact: true }).fill(cfg.pass);
}

const interactive = (page) => Promise.all([
  page.locator('#role').filter({ hasText: 'live sandbox' }).waitFor({ timeout: 60000 }),
  page.locator(`.tree [data-path="${cfg.marker}"]`).waitFor({ timeout: 60000 }),
]);

// fresh runs f on a new page in a context of its own (no cookies, no cache).
async function fresh(f) {
  const context = await browser.newContext({ baseURL: cfg.base, viewport: { width: 1280, height: 800 } });
  try {
    return await f(await context.newPage());
  } finally {
    await context.close();
  }
}

const ops = {
  async init(m) {
    cfg = m;
    const context = await browser.newContext({ baseURL: cfg.base, viewport: { width: 1280, height: 800 } });
    desk = await context.newPage();
    await signIn(desk);
    await desk.getByRole('button', { name: 'Sign in' }).click();
    await desk.waitForURL((u) => u.hostname.startsWith('desktop-'), { timeout: 60000 });
    await interactive(desk);
    await desk.getByRole('tab', { name: 'Terminal' }).click();
    await desk.waitForFunction(() => window.paddockDesktop.terminal.current?.ready, null, { timeout: 60000 });
    // A prompt that does not move: the keystroke's echo is the only output.
    await desk.locator('#term-1 .xterm-helper-textarea').focus();
    await desk.keyboard.type("PS1='$ '; PROMPT_COMMAND=; clear\n");
    await desk.waitForTimeout(500);
    // The app's host (the preview's origin) in a tab of the same browser: signed in by its
    // own handoff, as a person who opens the app without the desktop.
    appTab = await context.newPage();
    await appTab.goto(`${cfg.appHost}/`, { timeout: 60000 });
    await appTab.getByText(cfg.welcome).first().waitFor({ timeout: 60000 });
    return { session: await desk.evaluate(() => window.paddockDesktop.terminal.current.session) };
  },
  welcome: () => fresh(async (page) => {
    await signIn(page);
    // Today's landing before the desktop: the control plane's / handed off to the app.
    // The sign-in's answer (a redirect to /, which hands off to the desktop) is sent to the
    // app's host instead, cookies and all.
    await page.route(`${cfg.base}/auth/login`, async (r) => {
      if (r.request().method() !== 'POST') return r.continue();
      const res = await r.fetch({ maxRedirects: 0 });
      return r.fulfill({ response: res, headers: { ...res.headers(), location: `${cfg.app}/` } });
    });
    const t0 = Date.now();
    await page.getByRole('button', { name: 'Sign in' }).click();
    if (process.env.BENCH_DEBUG) {
      page.on('framenavigated', (f) => console.error(`welcome → ${f.url()}`));
      page.on('response', (r) => console.error(`welcome ${r.request().method()} ${r.url()} ${r.status()} ${r.headers().location || ''}`));
      page.on('requestfailed', (r) => console.error(`welcome failed ${r.url()} ${r.failure()?.errorText}`));
    }
    await page.waitForURL((u) => u.origin === cfg.app, { timeout: 60000 });
    await page.getByText(cfg.welcome).first().waitFor({ timeout: 60000 });
    return { ms: Date.now() - t0 };
  }),
  desktop: () => fresh(async (page) => {
    await signIn(page);
    let bytes = 0;
    page.on('requestfinished', async (r) => {
      if (!new URL(r.url()).hostname.startsWith('desktop-') || new URL(r.url()).pathname.startsWith('/api/')) return;
      const s = await r.sizes().catch(() => null);
      if (s) bytes += s.responseBodySize;
    });
    const t0 = Date.now();
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.waitForURL((u) => u.hostname.startsWith('desktop-'), { timeout: 60000 });
    await interactive(page);
    const ms = Date.now() - t0;
    await page.waitForLoadState('networkidle');
    return { ms, bytes };
  }),
  static: (m) => fresh(async (page) => {
    const origin = new URL(m.url).origin;
    let bytes = 0;
    page.on('requestfinished', async (r) => {
      if (new URL(r.url()).origin !== origin) return;
      const s = await r.sizes().catch(() => null);
      if (s) bytes += s.responseBodySize;
    });
    const t0 = Date.now();
    await page.goto(m.url, { waitUntil: 'load', timeout: 60000 });
    const ms = Date.now() - t0;
    await page.waitForLoadState('networkidle');
    return { ms, bytes };
  }),
  async key(m) {
    await desk.bringToFront();
    if (await desk.locator('#pane-terminal').isHidden()) await desk.getByRole('tab', { name: 'Terminal' }).click();
    const want = m.key === 'Backspace' ? 8 : m.key.charCodeAt(0);
    const armed = desk.evaluate((want) => new Promise((resolve, reject) => {
      const ws = window.paddockDesktop.terminal.current.ws;
      let t0 = 0;
      const down = () => { t0 = performance.now(); };
      document.addEventListener('keydown', down, { capture: true, once: true });
      const got = (e) => {
        // Output of this key: its byte after the stream's tag byte.
        if (!t0 || typeof e.data === 'string' || !new Uint8Array(e.data).subarray(1).includes(want)) return;
        ws.removeEventListener('message', got);
        resolve(performance.now() - t0);
      };
      ws.addEventListener('message', got);
      setTimeout(() => reject(new Error('no echo within 30 s')), 30000);
    }), want);
    await desk.locator('#term-1 .xterm-helper-textarea').focus();
    await desk.keyboard.press(m.key);
    return { ms: await armed };
  },
  async undo(m) {
    // The tab in front: a background tab's timers and frames are throttled.
    await desk.bringToFront();
    await desk.getByRole('tab', { name: 'Timeline' }).click();
    const frame = desk.frameLocator('#preview');
    const t0 = Date.now();
    await desk.locator('#undo').click();
    // The person goes to the preview as soon as the undo is done (a hidden frame reloads
    // when it is shown).
    await desk.locator('#status').filter({ hasText: /Undo done/ }).waitFor({ timeout: 60000 });
    await desk.getByRole('tab', { name: 'Preview' }).click();
    await frame.getByText(m.want).waitFor({ timeout: 60000 }).catch(async (e) => {
      const status = await desk.locator('#status').textContent();
      const shown = await frame.locator('body').textContent().catch((x) => String(x));
      throw new Error(`${e.message.split('\n')[0]}; status ${JSON.stringify(status)}; the frame shows ${JSON.stringify(shown)}`);
    });
    return { ms: Date.now() - t0 };
  },
  // reload reloads the app's tab until it shows want, at once each time: a person
  // without the desktop, after `paddock undo`.
  async reload(m) {
    await appTab.bringToFront();
    const t0 = Date.now();
    for (;;) {
      await appTab.reload({ timeout: 60000 });
      if ((await appTab.locator('body').textContent()).includes(m.want)) return { ms: Date.now() - t0 };
      if (Date.now() - t0 > 60000) throw new Error(`the app's tab did not show ${m.want} within a minute`);
    }
  },
  // preview shows the preview pane and waits for it to show want.
  async preview(m) {
    await desk.bringToFront();
    await desk.getByRole('tab', { name: 'Preview' }).click();
    await desk.getByRole('button', { name: 'Reload' }).click();
    await desk.frameLocator('#preview').getByText(m.want).waitFor({ timeout: 60000 });
    await desk.getByRole('tab', { name: 'Timeline' }).click();
    return {};
  },
};

const rl = readline.createInterface({ input: process.stdin });
for await (const line of rl) {
  if (!line.trim()) continue;
  let answer;
  try {
    const m = JSON.parse(line);
    if (!ops[m.op]) throw new Error(`no op ${m.op}`);
    answer = await ops[m.op](m);
  } catch (e) {
    answer = { error: String(e && e.stack || e) };
  }
  process.stdout.write(JSON.stringify(answer) + '\n');
}
await browser.close();
