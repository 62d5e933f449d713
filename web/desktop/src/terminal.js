// The terminal pane: xterm.js on a PTY in the sandbox, over the exec stream WebSocket,
// in tabs. A session is kept by the agent when its connection drops: the tab reconnects
// and reattaches from the last byte it showed (the agent replays what it still holds).
import { Terminal } from '@xterm/xterm';
import { FitAddon } from '@xterm/addon-fit';
import { base, h } from './api.js';
import { say } from './status.js';

const wsURL = () => `${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}${base}/exec/stream`;
const SHELL = ['/bin/sh', '-c', 'if command -v bash >/dev/null; then exec bash -l; else exec sh -l; fi'];
const enc = new TextEncoder();
const CHUNK = 32 << 10; // a paste goes out in pieces, each well under the stream's message limit
const MAX_PENDING = 1 << 20;

class Session {
  constructor(pane, n) {
    this.pane = pane;
    this.n = n;
    this.offset = 0; // bytes of output shown, for a reattach
    this.session = null;
    this.ended = false;
    this.retries = 0;
    this.ready = false;
    this.pending = [];
    this.pendingBytes = 0;
    this.term = new Terminal({ cursorBlink: true, fontSize: 13, scrollback: 5000, fontFamily: 'ui-monospace, Menlo, Consolas, monospace' });
    this.fit = new FitAddon();
    this.term.loadAddon(this.fit);
    this.host = h('div', { class: 'term', id: `term-${n}`, role: 'tabpanel', 'aria-label': `Terminal ${n}` });
    this.tab = h('button', { role: 'tab', class: 'term-tab', id: `term-tab-${n}`, 'aria-controls': `term-${n}`, onclick: () => pane.show(this) }, `Terminal ${n}`);
    this.closeBtn = h('button', { class: 'term-close', 'aria-label': `Close terminal ${n}`, title: 'Close', onclick: () => pane.close(this) }, '×');
    this.term.onData((d) => this.send(enc.encode(d)));
    this.term.onResize(({ rows, cols }) => this.control({ type: 'resize', rows, cols }));
  }

  mount() {
    this.term.open(this.host);
    this.fitNow();
    this.connect();
  }

  fitNow() {
    try { this.fit.fit(); } catch { /* hidden: no size */ }
  }

  // send writes keystrokes; those typed while the connection is down wait for it (up to
  // a bound), so nothing typed is lost to a reconnect.
  send(bytes) {
    if (!this.ready) {
      if (this.pendingBytes + bytes.length <= MAX_PENDING) {
        this.pending.push(bytes);
        this.pendingBytes += bytes.length;
      } else {
        // Past the bound the keys are not kept: say so, once per outage, never silently.
        this.unsent = (this.unsent || 0) + bytes.length;
        if (this.unsent === bytes.length) {
          const msg = `${bytes.length} bytes not sent: the connection is down and 1 MiB of input already waits for it; type or paste them again once it is back`;
          this.term.write(`\r\n\x1b[31m[${msg}]\x1b[0m\r\n`);
          say(`Terminal ${this.n}: ${msg}`, 'error');
        }
      }
      return;
    }
    for (let i = 0; i < bytes.length; i += CHUNK) this.ws.send(bytes.subarray(i, i + CHUNK));
  }

  control(msg) {
    if (this.ws && this.ws.readyState === WebSocket.OPEN) this.ws.send(JSON.stringify(msg));
  }

  connect() {
    const ws = new WebSocket(wsURL(), 'paddock.exec.v1');
    ws.binaryType = 'arraybuffer';
    this.ws = ws;
    ws.onopen = () => {
      this.retries = 0;
      const tty = { rows: this.term.rows, cols: this.term.cols };
      if (this.session) ws.send(JSON.stringify({ attach: this.session, offset: this.offset, tty }));
      else ws.send(JSON.stringify({ argv: SHELL, env: ['TERM=xterm-256color'], tty, keep: true }));
    };
    ws.onmessage = (e) => {
      if (typeof e.data === 'string') {
        const m = JSON.parse(e.data);
        if (m.type === 'started') {
          const again = this.session !== null;
          this.session = m.session_id;
          this.ready = true;
          this.unsent = 0;
          const queued = this.pending;
          this.pending = [];
          this.pendingBytes = 0;
          for (const b of queued) this.send(b);
          if (again) say(`Terminal ${this.n}: reconnected to the same shell`);
        }
        else if (m.type === 'exit') {
          this.ended = true;
          this.term.write(`\r\n\x1b[2m[the shell ended: exit ${m.exit_code}${m.error ? ' — ' + m.error : ''}]\x1b[0m\r\n`);
          this.tab.textContent = `Terminal ${this.n} (ended)`;
        }
        return;
      }
      const b = new Uint8Array(e.data);
      this.offset += b.length - 1;
      this.term.write(b.subarray(1));
    };
    ws.onclose = (e) => {
      if (this.ws === ws) this.ready = false;
      if (this.ended || this.closed || this.ws !== ws) return;
      if (e.code === 4400 || e.code === 4403) {
        this.ended = true;
        this.term.write(`\r\n\x1b[31m[${e.reason || 'refused'}]\x1b[0m\r\n`);
        return;
      }
      const wait = Math.min(500 * 2 ** this.retries++, 10000);
      say(`Terminal ${this.n}: connection lost; reconnecting…`);
      this.term.write('\r\n\x1b[2m[connection lost; reconnecting…]\x1b[0m\r\n');
      setTimeout(() => this.connect(), wait);
    };
  }

  dispose() {
    this.closed = true;
    // Closing a tab hangs its shell up, as closing a terminal window does.
    if (this.ws && this.ws.readyState === WebSocket.OPEN) {
      this.control({ type: 'signal', signal: 1 });
      this.ws.close(1000, 'tab closed');
    }
    this.term.dispose();
  }
}

export class TerminalPane {
  constructor() {
    this.sessions = [];
    this.n = 0;
    this.tabs = h('div', { class: 'term-tabs', role: 'tablist', 'aria-label': 'Terminals' });
    this.newBtn = h('button', { id: 'new-terminal', onclick: () => this.add(), 'aria-label': 'New terminal' }, '+ New terminal');
    this.body = h('div', { class: 'term-body' });
    this.el = h('div', { class: 'pane terminal', id: 'pane-terminal', role: 'tabpanel', 'aria-labelledby': 'tab-terminal', hidden: true },
      h('div', { class: 'term-bar' }, this.tabs, this.newBtn), this.body);
    new ResizeObserver(() => this.current?.fitNow()).observe(this.body);
  }

  shown() {
    if (this.sessions.length === 0) this.add();
    else this.current?.fitNow();
    this.current?.term.focus();
  }

  add() {
    const s = new Session(this, ++this.n);
    this.sessions.push(s);
    this.tabs.append(h('span', { class: 'term-tab-wrap' }, s.tab, s.closeBtn));
    this.body.append(s.host);
    this.show(s);
    s.mount();
    s.term.focus();
  }

  show(s) {
    this.current = s;
    for (const o of this.sessions) {
      o.host.hidden = o !== s;
      o.tab.setAttribute('aria-selected', String(o === s));
    }
    s.fitNow();
    s.term.focus();
  }

  close(s) {
    s.dispose();
    s.host.remove();
    s.tab.parentElement.remove();
    this.sessions = this.sessions.filter((o) => o !== s);
    if (this.current === s) this.current = null;
    if (this.sessions.length) this.show(this.sessions[this.sessions.length - 1]);
  }
}
