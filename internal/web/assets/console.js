// paddock's console: small vanilla script over the control plane's /api/v1, with the
// session cookie and the page's CSRF token. No framework, no inline code (the page's
// CSP allows none). Every failure is shown next to what caused it, and no form is
// cleared unless what it asked for happened.
'use strict';

const csrf = document.querySelector('meta[name="csrf-token"]').content;
const minPassword = Number(document.querySelector('meta[name="min-password-len"]').content) || 0;
const $ = (sel, root = document) => root.querySelector(sel);
const $$ = (sel, root = document) => Array.from(root.querySelectorAll(sel));

// ApiError carries the API's error code and message.
class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

// api calls the control plane and returns the decoded JSON (null for 204). Errors
// become ApiError with the server's message; a lost session says so.
async function api(method, path, body) {
  const init = { method, headers: { Accept: 'application/json' }, credentials: 'same-origin' };
  if (method !== 'GET') init.headers['X-CSRF-Token'] = csrf;
  if (body !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let resp;
  try {
    resp = await fetch(path, init);
  } catch (e) {
    throw new ApiError(0, 'unavailable', 'Could not reach the server. Check that it is running, then try again.');
  }
  if (resp.status === 204) return null;
  let data = null;
  try {
    data = await resp.json();
  } catch (e) {
    // Not JSON: fall through to a message naming the status.
  }
  if (!resp.ok) {
    const err = (data && data.error) || {};
    let msg = err.message || `The server answered ${resp.status}.`;
    if (resp.status === 401) msg = 'Your session has ended. Sign in again (reload this page).';
    throw new ApiError(resp.status, err.code || '', sentence(msg));
  }
  return data;
}

// sentence capitalises a server message and ends it with a full stop.
function sentence(s) {
  s = String(s).replace(/: (invalid argument|not found|permission denied|already exists|failed precondition|unauthenticated|limit exceeded|unavailable)$/, '');
  // A leading field name (expires_in, limits.memory) stays as the API spells it.
  if (!/^[a-z0-9]+[._][a-z0-9._]*\b/.test(s)) s = s.charAt(0).toUpperCase() + s.slice(1);
  return /[.!?]$/.test(s) ? s : s + '.';
}

// el builds an element: el('td', {class: 'x'}, 'text', child...). Text is always text.
function el(tag, attrs = {}, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? '' : v);
  }
  for (const k of kids) if (k !== undefined && k !== null) e.append(k);
  return e;
}

function when(t) {
  if (!t) return '—';
  const d = new Date(t);
  if (Number.isNaN(d.getTime()) || d.getFullYear() < 2000) return '—';
  return d.toLocaleString(undefined, { dateStyle: 'medium', timeStyle: 'short' });
}

function bytes(n) {
  if (!n) return '—';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  return `${Number.isInteger(n) ? n : n.toFixed(1)} ${units[i]}`;
}

// flash says what just happened, for everyone (a status live region).
function flash(msg, kind = 'notice') {
  const f = $('#flash');
  f.textContent = msg;
  f.className = `alert alert-${kind}`;
  f.hidden = false;
}

function showError(box, err) {
  box.textContent = err instanceof ApiError ? err.message : sentence(String(err && err.message ? err.message : err));
  box.hidden = false;
}

function clearError(box) {
  box.hidden = true;
  box.textContent = '';
}

// busy disables a button while work runs and says so on it.
async function busy(button, label, work) {
  const was = button.textContent;
  button.disabled = true;
  button.textContent = label;
  try {
    return await work();
  } finally {
    button.disabled = false;
    button.textContent = was;
  }
}

// confirmDialog asks a yes/no question in a modal dialog; resolves true on Confirm.
function confirmDialog(title, text, okLabel) {
  const d = $('#confirm');
  $('#confirm-title').textContent = title;
  $('#confirm-text').textContent = text;
  $('#confirm-ok').textContent = okLabel;
  d.returnValue = '';
  return new Promise((resolve) => {
    d.addEventListener('close', () => resolve(d.returnValue === 'ok'), { once: true });
    d.showModal();
  });
}

// focusField puts the cursor in the field a server message names: a leading field
// ("new_password: …", "limits.memory: …", by its last part), or, for a secret, its
// value when the message is about the value and its name otherwise.
function focusField(form, err) {
  const msg = (err && err.message) || '';
  let name = '';
  const m = /^([a-z_.]+): /i.exec(msg);
  if (m) name = m[1].split('.').pop().toLowerCase();
  else if (/^secret /i.test(msg)) name = /\bvalue\b/.test(msg) ? 'value' : 'name';
  const field = name && form.elements[name];
  if (field && field.focus) field.focus();
  else if (field && field[0] && field[0].focus) field[0].focus(); // a group of checkboxes
}

// form wires a form's submit: run(fields) does the work; on failure the message is
// shown in the form's alert and every field keeps what was typed.
function form(id, run) {
  const f = document.getElementById(id);
  if (!f) return;
  const box = $('[data-error]', f);
  f.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    clearError(box);
    const button = $('button[type="submit"]', f);
    try {
      await busy(button, 'Working…', () => run(f));
    } catch (err) {
      showError(box, err);
      focusField(f, err);
    }
  });
}

// ---- Sandboxes -------------------------------------------------------------------

function memoryOf(sb) {
  return bytes(sb.limits && sb.limits.memory_bytes);
}

function diskOf(sb) {
  return bytes(sb.limits && sb.limits.disk_bytes);
}

async function sandboxAction(sb, action, button) {
  try {
    await busy(button, `${action[0].toUpperCase()}${action.slice(1)}ing…`.replace('Stoping', 'Stopping'), () =>
      api('POST', `/api/v1/sandboxes/${encodeURIComponent(sb.id)}/${action}`));
    flash(`${sb.name || sb.id}: ${action} done.`);
  } catch (err) {
    flash(`${sb.name || sb.id}: ${action} failed: ${err.message}`, 'error');
  }
  await loadSandboxes();
}

async function deleteSandbox(sb, button) {
  const label = sb.name || sb.id;
  const extra = sb.role ? ` It is your ${sb.role} sandbox.` : '';
  if (!(await confirmDialog(`Delete ${label}?`, `This destroys the sandbox ${sb.id} and its workspace for good.${extra}`, 'Delete sandbox'))) {
    button.focus();
    return;
  }
  try {
    await busy(button, 'Deleting…', () => api('DELETE', `/api/v1/sandboxes/${encodeURIComponent(sb.id)}`));
    flash(`Deleted ${label}.`);
  } catch (err) {
    flash(`Deleting ${label} failed: ${err.message}`, 'error');
  }
  await loadSandboxes();
}

async function loadSandboxes() {
  const body = $('#sandbox-table tbody');
  let list;
  try {
    list = (await api('GET', '/api/v1/sandboxes')).sandboxes;
  } catch (err) {
    body.replaceChildren(el('tr', {}, el('td', { colspan: 7, class: 'error-cell' }, err.message)));
    return;
  }
  if (list.length === 0) {
    body.replaceChildren(el('tr', {}, el('td', { colspan: 7 }, 'No sandboxes yet. ', el('a', { href: '/start' }, 'Make your live and dev sandboxes'), ', or create one below.')));
    return;
  }
  body.replaceChildren(...list.map((sb) => {
    const label = sb.name || sb.id;
    const actions = el('td', { class: 'actions' },
      el('a', { class: 'button small', href: `/console/desktop/${encodeURIComponent(sb.id)}`, 'aria-label': `Open the desktop of ${label}` }, 'Desktop'));
    const btn = (text, onclick, cls = 'secondary small') => el('button', { type: 'button', class: cls, 'aria-label': `${text} ${label}`, onclick }, text);
    if (sb.state === 'running') {
      actions.append(btn('Stop', (e) => sandboxAction(sb, 'stop', e.currentTarget)), btn('Restart', (e) => sandboxAction(sb, 'restart', e.currentTarget)));
    } else {
      actions.append(btn('Start', (e) => sandboxAction(sb, 'start', e.currentTarget)));
    }
    actions.append(btn('Delete', (e) => deleteSandbox(sb, e.currentTarget), 'danger small'));
    return el('tr', { 'data-id': sb.id },
      el('td', {}, el('span', { class: 'name' }, label), el('br'), el('code', { class: 'id' }, sb.id)),
      el('td', {}, sb.role || '—'),
      el('td', {}, el('span', { class: `state state-${sb.state}` }, sb.state), sb.error ? el('span', { class: 'hint block' }, sb.error) : null),
      el('td', {}, sb.tier),
      el('td', {}, memoryOf(sb)),
      el('td', {}, diskOf(sb)),
      actions);
  }));
}

form('create-sandbox', async (f) => {
  const req = { tier: f.elements.tier.value, limits: {} };
  if (f.elements.name.value.trim()) req.name = f.elements.name.value.trim();
  if (f.elements.memory.value.trim()) req.limits.memory = f.elements.memory.value.trim();
  if (f.elements.disk.value.trim()) req.limits.disk = f.elements.disk.value.trim();
  const sb = await api('POST', '/api/v1/sandboxes', req);
  f.reset();
  flash(`Created ${sb.name || sb.id}.`);
  await loadSandboxes();
});

// ---- Roles -----------------------------------------------------------------------

function roleCard(role, sb) {
  return el('article', { class: 'card-mini', 'aria-label': `${role} sandbox` },
    el('h2', {}, role),
    el('p', {}, el('code', {}, sb.id)),
    el('p', {}, 'State: ', el('span', { class: `state state-${sb.state}` }, sb.state)),
    el('p', {}, `Tier ${sb.tier}, memory ${memoryOf(sb)}`),
    el('a', { class: 'button small', href: `/console/desktop/${encodeURIComponent(sb.id)}` }, `Open ${role} desktop`));
}

// loadRoles reads the roles from the sandbox listing, not GET /api/v1/roles: that one
// makes and starts the standing sandboxes, which merely looking must not do.
async function loadRoles() {
  const box = $('#roles-error');
  clearError(box);
  let list;
  try {
    list = (await api('GET', '/api/v1/sandboxes')).sandboxes;
  } catch (err) {
    $('#role-cards').replaceChildren();
    showError(box, err);
    return;
  }
  const live = list.find((sb) => sb.role === 'live');
  const dev = list.find((sb) => sb.role === 'dev');
  if (!live || !dev) {
    $('#role-cards').replaceChildren(el('p', {}, 'You have no live and dev sandboxes yet. ', el('a', { href: '/start' }, 'Make them'), '.'));
    $('#promote').hidden = true;
    return;
  }
  $('#role-cards').replaceChildren(roleCard('live', live), roleCard('dev', dev));
  $('#promote').hidden = false;
}

$('#promote').addEventListener('click', async (ev) => {
  const b = ev.currentTarget;
  const what = 'When dev runs a provider\'s dev server and has a packaged build, live starts serving that build and dev keeps its dev server. Otherwise your dev sandbox starts serving your app, and the current live sandbox becomes dev.';
  if (!(await confirmDialog('Promote dev to live?', what, 'Promote'))) {
    b.focus();
    return;
  }
  try {
    const r = await busy(b, 'Promoting…', () => api('POST', '/api/v1/promote'));
    // The answer's mode says what was done: a release of dev's build, or a swap.
    if (r.mode === 'release') {
      flash(`Promoted: live serves the packaged build ${r.artifact.slice(0, 12)}; dev keeps its dev server.` + (r.note ? ` Note: ${r.note}` : ''));
    } else {
      flash('Promoted: dev is now live.');
    }
  } catch (err) {
    showError($('#roles-error'), err);
  }
  await loadRoles();
});

// ---- Secrets ---------------------------------------------------------------------

async function loadSecrets() {
  const body = $('#secret-table tbody');
  let list;
  try {
    list = (await api('GET', '/api/v1/me/secrets')).secrets;
  } catch (err) {
    body.replaceChildren(el('tr', {}, el('td', { colspan: 4, class: 'error-cell' }, err.message)));
    return;
  }
  if (list.length === 0) {
    body.replaceChildren(el('tr', {}, el('td', { colspan: 4 }, 'No secrets yet.')));
    return;
  }
  body.replaceChildren(...list.map((s) => el('tr', { 'data-name': s.name },
    el('td', {}, el('code', {}, s.name)),
    el('td', {}, String(s.version)),
    el('td', {}, when(s.updated_at)),
    el('td', { class: 'actions' }, el('button', {
      type: 'button', class: 'danger small', 'aria-label': `Delete secret ${s.name}`,
      onclick: async (e) => {
        const b = e.currentTarget;
        if (!(await confirmDialog(`Delete secret ${s.name}?`, 'Sandboxes that use it will no longer get it.', 'Delete secret'))) {
          b.focus();
          return;
        }
        try {
          await busy(b, 'Deleting…', () => api('DELETE', `/api/v1/me/secrets/${encodeURIComponent(s.name)}`));
          flash(`Deleted secret ${s.name}.`);
        } catch (err) {
          flash(`Deleting secret ${s.name} failed: ${err.message}`, 'error');
        }
        await loadSecrets();
      },
    }, 'Delete')))));
}

form('set-secret', async (f) => {
  const name = f.elements.name.value.trim();
  if (!name) throw new ApiError(400, 'invalid_argument', 'name: enter a name for the secret.');
  // The name goes in the path; one that would change the path is refused here, naming it.
  if (/[/?#%\\]/.test(name)) throw new ApiError(400, 'invalid_argument', `name: "${name}" may not contain /, ?, #, % or \\.`);
  const s = await api('PUT', `/api/v1/me/secrets/${encodeURIComponent(name)}`, { value: f.elements.value.value });
  f.reset();
  flash(`Saved secret ${s.name} (version ${s.version}).`);
  await loadSecrets();
});

// ---- API tokens ------------------------------------------------------------------

async function loadTokens() {
  const body = $('#token-table tbody');
  let list;
  try {
    list = (await api('GET', '/api/v1/tokens')).tokens;
  } catch (err) {
    body.replaceChildren(el('tr', {}, el('td', { colspan: 7, class: 'error-cell' }, err.message)));
    return;
  }
  if (list.length === 0) {
    body.replaceChildren(el('tr', {}, el('td', { colspan: 7 }, 'No API tokens.')));
    return;
  }
  body.replaceChildren(...list.map((t) => el('tr', { 'data-id': t.id },
    el('td', {}, t.name || '—'),
    el('td', {}, el('code', {}, t.prefix)),
    el('td', {}, (t.scopes || []).join(', ')),
    el('td', {}, when(t.created_at)),
    el('td', {}, when(t.expires_at)),
    el('td', {}, when(t.last_used_at)),
    el('td', { class: 'actions' }, el('button', {
      type: 'button', class: 'danger small', 'aria-label': `Revoke token ${t.name || t.prefix}`,
      onclick: async (e) => {
        const b = e.currentTarget;
        if (!(await confirmDialog(`Revoke ${t.name || t.prefix}?`, 'Anything using this token stops working at once.', 'Revoke token'))) {
          b.focus();
          return;
        }
        try {
          await busy(b, 'Revoking…', () => api('DELETE', `/api/v1/tokens/${encodeURIComponent(t.id)}`));
          flash(`Revoked token ${t.name || t.prefix}.`);
        } catch (err) {
          flash(`Revoking failed: ${err.message}`, 'error');
        }
        await loadTokens();
      },
    }, 'Revoke')))));
}

form('create-token', async (f) => {
  $('#new-token').hidden = true;
  $('#new-token-value').textContent = '';
  const scopes = $$('input[name="scope"]:checked', f).map((c) => c.value);
  if (scopes.length === 0) throw new ApiError(400, 'invalid_argument', 'scope: choose at least one scope.');
  const req = { name: f.elements.name.value.trim(), scopes };
  if (f.elements.expires_in.value.trim()) req.expires_in = f.elements.expires_in.value.trim();
  const t = await api('POST', '/api/v1/tokens', req);
  f.reset();
  $('#new-token-value').textContent = t.token;
  $('#new-token').hidden = false;
  flash(`Created token ${t.name || t.prefix}.`);
  await loadTokens();
});

// ---- Account ---------------------------------------------------------------------

form('change-password', async (f) => {
  const cur = f.elements.current_password.value;
  const next = f.elements.new_password.value;
  if (!cur) throw new ApiError(400, 'invalid_argument', 'current_password: enter your current password.');
  if ([...next].length < minPassword) throw new ApiError(400, 'invalid_argument', `new_password: use at least ${minPassword} characters.`);
  if (next !== f.elements.confirm.value) throw new ApiError(400, 'invalid_argument', 'confirm: the two new passwords differ.');
  await api('POST', '/auth/password', { current_password: cur, new_password: next });
  f.reset();
  flash('Password changed. Your other sessions are signed out and your API tokens revoked.');
});

form('recovery-codes', async (f) => {
  const box = $('#new-codes');
  box.hidden = true;
  $('ol', box).replaceChildren();
  const cur = f.elements.current_password.value;
  if (!cur) throw new ApiError(400, 'invalid_argument', 'current_password: enter your current password.');
  const out = await api('POST', '/auth/recovery-codes', { current_password: cur });
  f.elements.current_password.value = '';
  $('ol', box).replaceChildren(...out.recovery_codes.map((c) => el('li', {}, el('code', {}, c))));
  box.hidden = false;
  flash('New recovery codes made; the old ones no longer work.');
});

// ---- Events ----------------------------------------------------------------------

const eventPage = 25;
const eventCursor = []; // the "before" of each page shown so far; [] is the newest page

function detailText(d) {
  if (!d) return '';
  return Object.entries(d).map(([k, v]) => `${k}=${typeof v === 'object' ? JSON.stringify(v) : v}`).join(' ');
}

async function loadEvents() {
  const box = $('#events-error');
  clearError(box);
  const before = eventCursor.length ? eventCursor[eventCursor.length - 1] : 0;
  let list;
  try {
    list = (await api('GET', `/api/v1/events?limit=${eventPage}${before ? `&before=${before}` : ''}`)).events;
  } catch (err) {
    showError(box, err);
    return;
  }
  const body = $('#event-table tbody');
  if (list.length === 0) {
    body.replaceChildren(el('tr', {}, el('td', { colspan: 4 }, before ? 'No older events.' : 'No events yet.')));
  } else {
    body.replaceChildren(...list.map((e) => el('tr', {},
      el('td', {}, el('time', { datetime: e.at }, when(e.at))),
      el('td', {}, el('code', {}, e.action)),
      el('td', {}, e.target || ''),
      el('td', { class: 'detail' }, detailText(e.detail)))));
  }
  const older = $('#events-older');
  older.disabled = list.length < eventPage;
  older.dataset.next = list.length ? String(list[list.length - 1].id) : '';
  $('#events-newest').disabled = eventCursor.length === 0;
}

$('#events-older').addEventListener('click', (e) => {
  eventCursor.push(Number(e.currentTarget.dataset.next));
  loadEvents();
});
$('#events-newest').addEventListener('click', () => {
  eventCursor.length = 0;
  loadEvents();
});

// ---- Admin -----------------------------------------------------------------------

async function loadAdmin() {
  const box = $('#admin-error');
  clearError(box);
  try {
    const [users, all, invites] = await Promise.all([
      api('GET', '/api/v1/users'), api('GET', '/api/v1/sandboxes?all=true'), api('GET', '/api/v1/invites')]);
    $('#user-table tbody').replaceChildren(...users.users.map((u) => el('tr', {},
      el('td', {}, u.username), el('td', {}, u.role), el('td', {}, el('code', {}, u.id)), el('td', {}, when(u.created_at)))));
    $('#all-sandbox-table tbody').replaceChildren(...all.sandboxes.map((sb) => el('tr', {},
      el('td', {}, sb.owner_name || sb.owner), el('td', {}, sb.name || sb.id), el('td', {}, sb.role || '—'),
      el('td', {}, el('span', { class: `state state-${sb.state}` }, sb.state)), el('td', {}, sb.tier),
      el('td', {}, memoryOf(sb)), el('td', {}, diskOf(sb)))));
    const ib = $('#invite-table tbody');
    if (invites.invites.length === 0) {
      ib.replaceChildren(el('tr', {}, el('td', { colspan: 5 }, 'No invites.')));
    } else {
      ib.replaceChildren(...invites.invites.map((i) => {
        const expired = new Date(i.expires_at) < new Date();
        const state = i.revoked_at ? 'revoked' : expired ? 'expired' : i.uses >= i.max_uses ? 'used up' : 'open';
        return el('tr', {},
          el('td', {}, el('code', {}, i.prefix)), el('td', {}, `${i.uses} of ${i.max_uses}`), el('td', {}, when(i.expires_at)),
          el('td', {}, state),
          el('td', { class: 'actions' }, state === 'open' ? el('button', {
            type: 'button', class: 'danger small', 'aria-label': `Revoke invite ${i.prefix}`,
            onclick: async (e) => {
              try {
                await busy(e.currentTarget, 'Revoking…', () => api('DELETE', `/api/v1/invites/${encodeURIComponent(i.id)}`));
                flash(`Revoked invite ${i.prefix}.`);
              } catch (err) {
                flash(`Revoking failed: ${err.message}`, 'error');
              }
              await loadAdmin();
            },
          }, 'Revoke') : null));
      }));
    }
  } catch (err) {
    showError(box, err);
  }
}

form('create-invite', async (f) => {
  $('#new-invite').hidden = true;
  const req = {};
  const uses = f.elements.uses.value.trim();
  if (uses) {
    if (!/^\d+$/.test(uses)) throw new ApiError(400, 'invalid_argument', `uses: "${uses}" is not a whole number.`);
    req.uses = Number(uses);
  }
  if (f.elements.expires_in.value.trim()) req.expires_in = f.elements.expires_in.value.trim();
  const inv = await api('POST', '/api/v1/invites', req);
  f.reset();
  $('#new-invite-value').textContent = inv.code;
  $('#new-invite').hidden = false;
  await loadAdmin();
});

// labelCells gives each cell its column's heading (data-label), which the narrow
// layout shows before the value once a table's rows are stacked.
function labelCells(table) {
  const heads = $$('thead th', table).map((th) => th.textContent);
  for (const tr of $$('tbody tr', table)) {
    $$('td', tr).forEach((td, i) => {
      if (heads[i] && !td.hasAttribute('colspan')) td.dataset.label = heads[i];
    });
  }
}

for (const table of $$('table.list')) {
  labelCells(table);
  new MutationObserver(() => labelCells(table)).observe($('tbody', table), { childList: true });
}

// ---- Sections --------------------------------------------------------------------

const loaders = { sandboxes: loadSandboxes, roles: loadRoles, secrets: loadSecrets, tokens: loadTokens, account: async () => {}, events: loadEvents, admin: loadAdmin };

// show displays the section the URL's fragment names (default: sandboxes), marks its
// link as current and loads its data.
async function show() {
  const want = location.hash.slice(1);
  const sections = $$('[data-section]');
  const current = sections.find((s) => s.id === want) || sections[0];
  for (const s of sections) s.hidden = s !== current;
  for (const a of $$('nav.sections a')) {
    if (a.getAttribute('href') === `#${current.id}`) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  // Once-shown values do not survive leaving their section.
  for (const id of ['new-token', 'new-invite', 'new-codes']) {
    const box = document.getElementById(id);
    if (box && !current.contains(box)) {
      box.hidden = true;
      $$('code', box).forEach((c) => { c.textContent = ''; });
    }
  }
  document.title = `${$('h1', current).textContent} · Console · paddock`;
  current.dataset.loaded = '';
  await loaders[current.id]();
  current.dataset.loaded = 'true';
}

window.addEventListener('hashchange', () => {
  $('#flash').hidden = true;
  show().then(() => $('#main').focus({ preventScroll: true }));
});
show();
