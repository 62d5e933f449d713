// The desktop's Build pane: a provider's step runs in the sandbox with its commands and
// log shown while it runs (a line the build prints arrives before the build ends), its
// result last; a directory no provider recognises says what was looked for.
// Run by internal/server's TestBrowserDesktopBuild, which sets BASE_URL, USERNAME,
// PASSWORD, SANDBOX and GATE (a file in the workspace the build waits for; this page makes
// it, through the desktop's exec, once it shows the build's first line).
import assert from 'node:assert/strict';
import { launch, screenshot } from './browser.mjs';

const env = (k) => {
  const v = process.env[k];
  if (!v) throw new Error(`${k} is not set`);
  return v;
};
const base = env('BASE_URL');
const sandbox = env('SANDBOX');
const step = (s) => console.log(`desktop-build.mjs: ${s}`);
const { context, close } = await launch(base, { width: 1280, height: 800 });
try {
  const page = await context.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.goto('/login');
  await page.getByLabel('Username').fill(env('USERNAME'));
  await page.getByLabel('Password', { exact: true }).fill(env('PASSWORD'));
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.waitForURL((u) => u.hostname === `desktop-${sandbox}.localhost`, { timeout: 60000 });
  await page.locator('#role').filter({ hasText: 'live sandbox' }).waitFor({ timeout: 30000 });

  await page.getByRole('tab', { name: 'Build' }).click();
  await page.getByLabel('Project directory').fill('nothing');
  await page.getByRole('button', { name: 'Run' }).click();
  await page.locator('#build-result').filter({ hasText: /build failed: .*looked for package\.json \(node\)/ }).waitFor({ timeout: 60000 });
  step('a directory no provider recognises: the pane says what was looked for');

  await page.getByLabel('Project directory').fill('app');
  await page.getByRole('button', { name: 'Run' }).click();
  // The build prints its first line, then waits for the gate: the line is on the page
  // while the step still runs.
  await page.locator('#build-log').filter({ hasText: 'building: first line' }).waitFor({ timeout: 120000 });
  assert.match(await page.locator('#build-result').textContent(), /running/);
  await page.locator('#build-steps li[data-state=running]').filter({ hasText: 'npm run build' }).waitFor();
  step('the build\'s first line is shown while the build runs');
  await screenshot(page, 'desktop-build-running');
  // From the page (Node does not resolve *.localhost): the desktop's own exec.
  const touch = await page.evaluate(async ([sb, gate]) => {
    const res = await fetch(`/api/v1/sandboxes/${sb}/exec`, {
      method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ argv: ['touch', gate] }),
    });
    return `${res.status} ${await res.text()}`;
  }, [sandbox, env('GATE')]);
  assert.match(touch, /^200 /, `touch ${env('GATE')}: ${touch}`);
  await page.locator('#build-result').filter({ hasText: 'build: done' }).waitFor({ timeout: 120000 });
  await page.locator('#build-log').filter({ hasText: 'building: done' }).waitFor();
  const rows = await page.locator('#build-steps li').allTextContents();
  assert.ok(rows.some((r) => /resolve \[1\/1\] npm install — ok/.test(r)) && rows.some((r) => /build \[1\/1\] npm run build — ok/.test(r)), `commands: ${rows}`);
  step('the build ended, each command shown ok');
  await screenshot(page, 'desktop-build-done');
  assert.deepEqual(errors, []);
  console.log('desktop-build=ok');
} finally {
  await close();
}
