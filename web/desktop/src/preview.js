// The preview pane: the app in a frame on its own origin (app-<sandbox>), and its state.
import { call, h } from './api.js';
import { say, fail } from './status.js';

export class PreviewPane {
  constructor() {
    this.frame = h('iframe', {
      id: 'preview', title: 'App preview', src: 'about:blank',
      // No top navigation: the app cannot take the desktop's tab away.
      sandbox: 'allow-scripts allow-same-origin allow-forms allow-popups allow-modals allow-downloads',
    });
    this.state = h('span', { class: 'app-state', id: 'app-state', role: 'status' }, 'app: …');
    // Logs: the running app's output, then the last ended run's; each the end (4 KiB) of it.
    this.current = h('pre', { id: 'app-output-current' });
    this.last = h('pre', { id: 'app-output-last' });
    this.currentHead = h('h3', {}, 'The running app');
    this.lastHead = h('h3', {}, 'The last run that ended');
    this.output = h('section', { class: 'app-output', id: 'app-output', 'aria-label': 'The app\'s output', hidden: true },
      h('button', { id: 'app-logs-refresh', onclick: () => this.poll() }, 'Refresh logs'),
      this.currentHead, this.current, this.lastHead, this.last);
    this.openLink = h('a', { id: 'app-open', target: '_blank', rel: 'noopener', hidden: true }, 'Open in a new tab');
    const b = (label, id, f) => h('button', { id, onclick: f }, label);
    this.el = h('div', { class: 'pane preview', id: 'pane-preview', role: 'tabpanel', 'aria-labelledby': 'tab-preview', hidden: true },
      h('div', { class: 'toolbar', role: 'toolbar', 'aria-label': 'Preview actions' },
        this.state,
        b('Reload', 'preview-reload', () => this.reload()),
        b('Logs', 'app-logs', () => this.toggleLogs()),
        b('Restart app', 'app-restart', () => this.restartApp()),
        b('Restart sandbox', 'sandbox-restart', () => this.restart()),
        this.openLink),
      this.output, this.frame);
    this.loaded = false;
    // The app's host answers a frame it has no cookie for with this message (to this
    // origin only): the direct load failed, so the frame goes through the handoff.
    window.addEventListener('message', (e) => {
      if (e.data !== 'paddock:preview-signin' || e.source !== this.frame.contentWindow) return;
      if (!this.direct || e.origin !== new URL(this.direct).origin) return;
      this.direct = null;
      this.noDirect = true;
      this.frame.src = `/desktop/preview?t=${Date.now()}`;
    });
  }

  shown() {
    if (!this.loaded || this.stale) this.reload();
  }

  // reload loads the app again in the frame; while the pane is hidden it waits until the
  // pane is shown (a frame loaded out of sight may not be laid out when it comes back).
  reload() {
    if (this.el.hidden) {
      this.stale = this.loaded;
      return;
    }
    this.stale = false;
    // A frame loaded once holds the app host's cookie (partitioned to this site): it loads
    // the app again directly. The first load goes through the desktop's handoff, which
    // makes that cookie (a frame cannot sign in).
    const app = this.status?.url;
    if (this.loaded && app && !this.noDirect) {
      this.direct = `${app}/`;
      this.frame.src = this.direct;
      return;
    }
    this.loaded = true;
    this.direct = null;
    this.frame.src = `/desktop/preview?t=${Date.now()}`;
  }

  async poll() {
    try {
      const st = await call('GET', '/app');
      this.status = st;
      let text = `app: ${st.state}`;
      if (st.state === 'backoff') {
        const x = st.last_exit || {};
        text += ` — exited ${x.signal ? 'on signal ' + x.signal : 'with code ' + x.exit_code}` +
          (st.next_start ? `, starts again ${new Date(st.next_start).toLocaleTimeString()}` : '') + ` (${st.restarts} restarts)`;
      } else if (st.restarts) {
        text += ` (${st.restarts} restarts)`;
      }
      this.state.textContent = text;
      this.state.dataset.state = st.state;
      this.showLogs(st);
      if (st.state === 'backoff' && st.last_output) this.output.hidden = false;
      if (st.url) { this.openLink.href = st.url; this.openLink.hidden = false; }
    } catch (e) {
      this.state.textContent = `app: unknown (${e.message})`;
      this.state.dataset.state = 'unknown';
    }
    return this.status;
  }

  // toggleLogs shows or hides the logs; shown, they are read again at once (the poll
  // keeps them current after that).
  toggleLogs() {
    this.output.hidden = !this.output.hidden;
    if (!this.output.hidden) this.poll();
  }

  // showLogs writes the app's output into the logs, keeping them scrolled to the end if
  // they were there.
  showLogs(st) {
    const o = this.output;
    const atEnd = o.scrollTop + o.clientHeight >= o.scrollHeight - 4;
    const cut = (yes) => (yes ? ' (its start is cut)' : '');
    const running = st.state !== 'backoff';
    this.currentHead.textContent = `The running app's output${cut(st.output_truncated)}`;
    this.current.textContent = st.output || (running ? '(no output yet)' : '(not running)');
    const x = st.last_exit;
    this.lastHead.textContent = `The last run that ended${x ? ` (${x.signal ? 'signal ' + x.signal : 'code ' + x.exit_code})` : ''}${cut(st.last_output_truncated)}`;
    this.last.textContent = st.last_output || (x ? '(no output)' : '(none has ended)');
    if (atEnd) o.scrollTop = o.scrollHeight;
  }

  // afterRestore loads the app again in the frame, on the restored files, at once: the
  // agent answers a restore (and a restart) once the app's new run is up. A load that finds
  // it not listening yet is answered with a page that loads again by itself.
  afterRestore(res) {
    if (this.loaded) this.reload();
    if (res.app_restarted) this.poll();
  }

  // restartApp starts the app again alone: terminals and the rest of the sandbox keep
  // running. The frame reloads once the new run is up.
  async restartApp() {
    try {
      say('Restarting the app…');
      await call('POST', '/app/restart');
      say('The app restarted');
      this.afterRestore({ app_restarted: true });
    } catch (e) {
      fail(e);
    }
  }

  async restart() {
    if (!confirm('Restart the whole sandbox? Running terminals end; the workspace is kept.')) return;
    try {
      say('Restarting the sandbox…');
      await call('POST', '/restart');
      say('The sandbox restarted');
      this.reload();
    } catch (e) {
      fail(e);
    }
  }
}
