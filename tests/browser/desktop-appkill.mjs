// The app killed mid-request while the desktop's preview shows it: the preview says
// precisely what happened (the proxy's answer naming the sandbox and that the connection
// closed before a response), tries again by itself once the app is back, and nothing in
// the desktop is lost (an unsaved edit stays in the editor, the saved file on disk).
// Run by internal/server's TestBrowserDesktopAppKilled, which sets BASE_URL, USERNAME,
// PASSWORD and SANDBOX (and SCREENSHOT_DIR); its app dies, SIGKILLed, on its first
// request for /die.
import assert from 'node:assert/strict';
import { launch, screenshot } from './browser.mjs';

const env = (k) => {
  const v = process.env[k];
  if (!v) throw new Error(`${k} is not set`);
  return v;
};
const base = env('BASE_URL');
const sandbox = env('SANDBOX');
const t0 = Date.now();
const step = (s) => console.log(`desktop-appkill.mjs: ${((Date.now() - t0) / 1000).toFixed(1)}s ${s}`);
const { context, close } = await launch(base, { width: 1280, height: 800 });

async function setEditor(page, text) {
  await page.locator('#editor .cm-content').click();
  await page.keyboard.press('Control+A');
  await page.keyboard.press('Delete');
  await page.keyboard.insertText(text);
}

const saved = '<p>page one</p><a id="die" href="/die">die</a>\n';
let page;
try {
  page = await context.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  page.on('dialog', (d) => d.accept('index.html'));
  await page.goto('/login');
  await page.getByLabel('Username').fill(env('USERNAME'));
  await page.getByLabel('Password', { exact: true }).fill(env('PASSWORD'));
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.waitForURL((u) => u.hostname === `desktop-${sandbox}.localhost`, { timeout: 60000 });
  const desk = new URL(page.url()).origin;
  await page.locator('#role').filter({ hasText: 'live sandbox' }).waitFor({ timeout: 30000 });

  await page.getByRole('tab', { name: 'Files' }).click();
  await page.getByRole('button', { name: 'New file' }).click();
  await page.locator('#file-title').filter({ hasText: 'index.html' }).waitFor();
  await setEditor(page, saved);
  await page.keyboard.press('Control+S');
  await page.locator('#status').filter({ hasText: /Saved index.html/ }).waitFor({ timeout: 30000 });
  await setEditor(page, '<p>an unsaved edit</p>\n');
  step('saved index.html, and left an unsaved edit');

  await page.getByRole('tab', { name: 'Preview' }).click();
  const frame = page.frameLocator('#preview');
  await frame.getByText('page one').waitFor({ timeout: 60000 });
  await frame.locator('#die').click();
  // The proxy's answer, in the frame: which sandbox, and what happened.
  await frame.getByText(new RegExp(`the live sandbox ${sandbox} is not answering: the connection closed before a response`)).waitFor({ timeout: 30000 });
  await screenshot(page, 'preview-app-killed');
  step('the preview says the app closed the connection before a response');
  // It loads again by itself once the app is back.
  await frame.getByText('back after the kill').waitFor({ timeout: 60000 });
  step('the preview came back by itself');

  // Nothing lost: the unsaved edit is still in the editor, the saved file on disk.
  await page.getByRole('tab', { name: 'Files' }).click();
  assert.match(await page.locator('#editor .cm-content').innerText(), /an unsaved edit/);
  const onDisk = await page.evaluate((u) => fetch(u).then((r) => r.text()), `${desk}/api/v1/sandboxes/${sandbox}/files/content?path=index.html`);
  assert.equal(onDisk, saved);
  assert.deepEqual(errors, []);
  step('the unsaved edit and the saved file are both kept');
} catch (e) {
  if (page) await screenshot(page, 'preview-app-killed-failed');
  throw e;
} finally {
  await close();
}
