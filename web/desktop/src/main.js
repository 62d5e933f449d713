// The paddock desktop: files, terminal, timeline, preview, agent and build of one sandbox, served by its
// agent on desktop-<sandbox>, calling the API on this same origin.
import '@xterm/xterm/css/xterm.css';
import './style.css';
import { call, h, sandboxID } from './api.js';
import { statusEl, say } from './status.js';
import { FilesPane } from './files.js';
import { TerminalPane } from './terminal.js';
import { TimelinePane } from './timeline.js';
import { PreviewPane } from './preview.js';
import { AgentPane } from './agent.js';
import { BuildPane } from './build.js';

const files = new FilesPane();
const terminal = new TerminalPane();
const preview = new PreviewPane();
const timeline = new TimelinePane({
  // The preview first: its frame's load takes the longest.
  afterRestore: async (res) => {
    preview.afterRestore(res);
    await files.reload();
  },
});

// After a turn of the agent or its undo: the files, the timeline and the app show it.
const agent = new AgentPane({
  afterTurn: async (res) => {
    if (res) preview.afterRestore(res);
    else if (preview.loaded) preview.reload();
    await files.reload();
    timeline.refresh();
  },
});

// After a provider's step: the files it wrote, its checkpoint, and a preview it started.
const build = new BuildPane({
  afterStep: async () => {
    await files.reload();
    timeline.refresh();
    if (preview.loaded) preview.reload();
  },
});

const panes = [
  { id: 'files', label: 'Files', pane: files, key: '1' },
  { id: 'terminal', label: 'Terminal', pane: terminal, key: '2' },
  { id: 'timeline', label: 'Timeline', pane: timeline, key: '3' },
  { id: 'preview', label: 'Preview', pane: preview, key: '4' },
  { id: 'agent', label: 'Agent', pane: agent, key: '5' },
  { id: 'build', label: 'Build', pane: build, key: '6' },
];

const tabs = panes.map((p) => h('button', {
  role: 'tab', id: `tab-${p.id}`, 'aria-controls': `pane-${p.id}`, title: `${p.label} (Alt+${p.key})`,
  onclick: () => select(p.id),
}, p.label));

function select(id) {
  for (const [i, p] of panes.entries()) {
    const on = p.id === id;
    p.pane.el.hidden = !on;
    tabs[i].setAttribute('aria-selected', String(on));
    tabs[i].tabIndex = on ? 0 : -1;
  }
  const p = panes.find((x) => x.id === id);
  if (p.id === 'timeline') timeline.refresh();
  if (p.id === 'files') files.refresh();
  p.pane.shown?.();
  if (location.hash !== '#' + id) history.replaceState(null, '', '#' + id);
}

const tablist = h('div', { role: 'tablist', class: 'tabs', 'aria-label': 'Desktop panes' }, tabs);
tablist.addEventListener('keydown', (e) => {
  const i = tabs.indexOf(document.activeElement);
  if (i < 0) return;
  if (e.key === 'ArrowRight' || e.key === 'ArrowLeft') {
    const j = (i + (e.key === 'ArrowRight' ? 1 : tabs.length - 1)) % tabs.length;
    tabs[j].focus();
    select(panes[j].id);
    e.preventDefault();
  }
});
// Alt+<n> picks a pane from anywhere, the terminal included: it is taken in the capture
// phase, before xterm.js, which would send it to the shell and keep the focus.
document.addEventListener('keydown', (e) => {
  if (e.altKey && !e.ctrlKey && !e.metaKey) {
    const p = panes.find((x) => x.key === e.key);
    if (p) { e.preventDefault(); e.stopPropagation(); select(p.id); tabs[panes.indexOf(p)].focus(); }
  }
}, true);

const roleEl = h('span', { class: 'role', id: 'role' });
const switchLink = h('a', { id: 'switch-role', hidden: true });

document.body.append(
  h('header', { class: 'top' },
    h('h1', {}, 'paddock'),
    h('span', { class: 'sandbox', title: 'This desktop\'s sandbox' }, sandboxID),
    roleEl, switchLink, tablist),
  h('main', { class: 'panes' }, panes.map((p) => p.pane.el)),
  h('footer', {}, statusEl),
);

// Signed out (the session ended, or paddock restarted and forgot this host's sign-in): a
// reload goes through the handoff again. Unsaved edits ask before the page goes.
const signin = h('div', { class: 'signin', id: 'signin', role: 'alert', hidden: true },
  'You are signed out of this desktop. ',
  h('button', { id: 'signin-again', onclick: () => location.reload() }, 'Sign in again'));
document.body.prepend(signin);
window.addEventListener('paddock:signedout', () => { signin.hidden = false; });
window.addEventListener('beforeunload', (e) => {
  if (files.dirty) e.preventDefault();
});

async function loadSandbox() {
  try {
    const sb = await call('GET', '');
    document.title = `${sb.name || sb.id} — paddock desktop`;
    roleEl.textContent = sb.role ? `${sb.role} sandbox` : 'sandbox (no role)';
    const other = sb.role === 'live' ? 'dev' : 'live';
    switchLink.textContent = `Switch to ${other}`;
    switchLink.href = `/desktop/switch?role=${other}`;
    switchLink.hidden = false;
  } catch (e) {
    say(e.message, 'error');
  }
}

loadSandbox();
preview.poll();
setInterval(() => preview.poll(), 3000);
// Tests reach the panes here (to drop a terminal's connection, as a network would).
window.paddockDesktop = { files, terminal, timeline, preview, agent, build };
select(panes.find((p) => '#' + p.id === location.hash)?.id || 'files');
