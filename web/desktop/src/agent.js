// The agent pane: the coding agent in this sandbox. A turn runs `paddock-agent code` over
// the exec stream, as `paddock agent` does (same API, same policy and audit), and each of
// its events (coder.Event, one JSON line each) is shown as it arrives. The session is
// kept: a reload reattaches to a turn under way, and the conversation so far comes from
// the harness's own log (`paddock-agent code --history`), so it survives reloads and
// restarts. Each turn ends as a checkpoint the pane undoes in one click.
import { base, call, h } from './api.js';
import { say, fail } from './status.js';

const AGENT = '/.paddock/paddock-agent';
const WORKSPACE = '/workspace';
const wsURL = () => `${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}${base}/exec/stream`;
const RUNNING_KEY = (sb) => `paddock.agent.running.${sb}`;

// What each kind of stop means, said plainly (the harness's error kinds).
const KINDS = {
  rate_limited: 'Rate limited',
  out_of_budget: 'Out of budget',
  provider_unavailable: 'The model provider is down',
  gateway_unreachable: 'The gateway does not answer',
  provider_refused: 'The provider refused the request',
  stream_cut: 'The answer broke off',
  stream_stalled: 'The answer stalled',
  bad_stream: 'The answer could not be read',
  provider_error: 'The provider reported an error',
  step_budget: 'Step budget reached',
  canceled: 'Stopped',
  checkpoint_failed: 'Checkpoint problem',
};
const kindLabel = (k) => KINDS[k] || `Stopped (${k})`;
// stopped is what a stop says: its kind's label, then the harness's message (which may
// already begin with it).
const stopped = (kind, msg) => {
  const label = kindLabel(kind);
  if (msg.toLowerCase().startsWith(label.toLowerCase())) return label + msg.slice(label.length);
  return `${label}: ${msg}`;
};

// stream runs argv (or reattaches to a kept session) and hands each stdout line to
// onLine. It resolves with the exit message, or rejects when the session cannot be
// reached; a dropped connection reattaches from the last byte seen.
function stream({ argv, attach, keep, onStarted, onLine, handle = {} }) {
  return new Promise((resolve, reject) => {
    let session = attach || null, offset = 0, pending = '', stderr = '', retries = 0, started = false;
    const dec = new TextDecoder();
    const connect = () => {
      const ws = new WebSocket(wsURL(), 'paddock.exec.v1');
      ws.binaryType = 'arraybuffer';
      handle.ws = ws;
      let exited = false;
      ws.onopen = () => {
        if (session) ws.send(JSON.stringify({ attach: session, offset }));
        // A kept session is a terminal's (its output one stream, replayable from an
        // offset); lines end in \r\n there, and the harness's stderr comes in between.
        else ws.send(JSON.stringify(keep ? { argv, cwd: WORKSPACE, keep, tty: { rows: 40, cols: 1000 } } : { argv, cwd: WORKSPACE }));
      };
      ws.onmessage = (e) => {
        if (typeof e.data === 'string') {
          const m = JSON.parse(e.data);
          if (m.type === 'started') {
            started = true;
            retries = 0;
            session = m.session_id;
            onStarted?.(session);
          } else if (m.type === 'exit') {
            exited = true;
            if (pending.trim()) onLine(pending.replace(/\r$/, ''));
            pending = '';
            resolve({ ...m, stderr });
          }
          return;
        }
        const b = new Uint8Array(e.data);
        offset += b.length - 1;
        if (b[0] === 2) {
          stderr = (stderr + dec.decode(b.subarray(1))).slice(-4096);
          return;
        }
        pending += dec.decode(b.subarray(1), { stream: true });
        const lines = pending.split('\n');
        pending = lines.pop();
        for (const l of lines) if (l.trim()) onLine(l.replace(/\r$/, ''));
      };
      ws.onclose = (e) => {
        if (exited) return;
        if (!session || !started || e.code === 4400 || e.code === 4403 || retries >= 6) {
          reject(new Error(e.reason || 'the agent\'s session could not be reached'));
          return;
        }
        started = false;
        setTimeout(connect, Math.min(500 * 2 ** retries++, 8000));
      };
    };
    connect();
  });
}

// Turn is one turn's element, built from its events.
class Turn {
  constructor(pane, n, prompt) {
    this.pane = pane;
    this.n = n;
    this.calls = new Map();
    this.texts = new Map();
    this.steps = h('div', { class: 'steps' });
    this.foot = h('div', { class: 'turn-foot' });
    this.el = h('li', { class: 'turn', id: `turn-${n}`, 'data-turn': n },
      h('div', { class: 'you' }, h('span', { class: 'who' }, 'You'), h('p', {}, prompt)),
      this.steps, this.foot);
  }

  event(e) {
    // The model answering again ends a wait for a rate limit.
    if (e.type !== 'wait' && e.type !== 'error' && this.pane.bannerEl.dataset.kind === 'wait') this.pane.banner('');
    switch (e.type) {
      case 'text': {
        let el = this.texts.get(e.step);
        if (!el) {
          el = h('p', { class: 'say' });
          this.texts.set(e.step, el);
          this.steps.append(el);
        }
        el.textContent += e.text;
        break;
      }
      case 'tool_call': {
        const out = h('pre', { class: 'out' }, 'running…');
        const d = h('details', { class: 'tool running', 'data-tool': e.tool },
          h('summary', {}, h('code', {}, e.tool), ' ', h('span', { class: 'args' }, e.args || '')), out);
        this.calls.set(e.call_id || `${e.step}-${this.calls.size}`, { d, out });
        this.steps.append(d);
        break;
      }
      case 'tool_result': {
        let c = this.calls.get(e.call_id);
        if (!c) {
          this.event({ type: 'tool_call', tool: e.tool, call_id: e.call_id, step: e.step });
          c = this.calls.get(e.call_id);
        }
        c.out.textContent = e.output || '';
        c.d.classList.remove('running');
        c.d.classList.add(e.ok === false ? 'failed' : 'ok');
        break;
      }
      case 'wait':
        this.note(`Waiting ${Math.round(e.retry_after)} s before asking again: ${stopped(e.kind, e.message)}`, 'wait', e.kind);
        this.pane.banner(`${stopped(e.kind, e.message)} — the agent waits ${Math.round(e.retry_after)} s and asks again`, 'wait', e.kind);
        break;
      case 'error':
        this.note(stopped(e.kind, e.message), 'error', e.kind);
        if (e.kind !== 'checkpoint_failed') this.pane.banner(stopped(e.kind, e.message), 'error', e.kind);
        break;
      case 'recovered':
        this.note(e.message, 'recovered');
        break;
      case 'answer': {
        const shown = [...this.texts.values()].some((el) => el.textContent.trim() === (e.text || '').trim());
        if (!shown && e.text) this.steps.append(h('p', { class: 'say' }, e.text));
        this.el.classList.add('answered');
        break;
      }
      case 'checkpoint':
        this.checkpoint = e.checkpoint;
        this.undoBtn = h('button', { id: `undo-turn-${this.n}`, class: 'undo-turn', onclick: () => this.pane.undoTurn(this) }, 'Undo this turn');
        this.mark = h('span', { class: 'mark' });
        this.foot.append(h('div', { class: 'checkpoint' },
          'Checkpoint ', h('code', { title: e.checkpoint }, e.checkpoint.slice(0, 12)), ' ', this.undoBtn, ' ', this.mark));
        break;
      case 'done':
        this.el.classList.add('done');
        break;
    }
  }

  note(text, cls, kind) {
    this.foot.append(h('p', { class: `note ${cls}`, 'data-kind': kind }, text));
  }
}

export class AgentPane {
  constructor({ afterTurn }) {
    this.afterTurn = afterTurn;
    this.turns = new Map();
    this.arrivals = [];
    this.other = '';
    this.running = false;
    this.list = h('ol', { class: 'agent-log', id: 'agent-log', 'aria-label': 'The conversation with the agent', 'aria-live': 'polite' });
    this.bannerEl = h('div', { class: 'agent-banner', id: 'agent-banner', role: 'alert', hidden: true });
    this.input = h('textarea', { id: 'agent-input', rows: 3, 'aria-label': 'What you want the agent to do', placeholder: 'What should the agent do? (Ctrl+Enter sends)' });
    this.sendBtn = h('button', { id: 'agent-send', type: 'submit' }, 'Send');
    this.stopBtn = h('button', { id: 'agent-stop', type: 'button', hidden: true, onclick: () => this.stop() }, 'Stop');
    this.input.addEventListener('keydown', (e) => {
      if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) { e.preventDefault(); this.send(); }
    });
    const form = h('form', { class: 'agent-form', onsubmit: (e) => { e.preventDefault(); this.send(); } }, this.input, h('div', { class: 'agent-actions' }, this.sendBtn, this.stopBtn));
    this.el = h('div', { class: 'pane agent', id: 'pane-agent', role: 'tabpanel', 'aria-labelledby': 'tab-agent', hidden: true },
      this.choiceForm(), this.bannerEl, this.list, form);
    this.loaded = null;
  }

  // choiceForm is the provider and model the agent asks: the user's own choice, kept by
  // the server for all their sandboxes (GET/PUT /api/v1/me/agent), used from the next turn.
  choiceForm() {
    this.providerSel = h('select', { id: 'agent-provider', 'aria-label': 'The provider the agent asks' });
    this.modelIn = h('input', { id: 'agent-model', type: 'text', maxlength: 200, spellcheck: 'false', 'aria-label': 'The model the agent asks' });
    this.choiceBtn = h('button', { id: 'agent-choice-save', type: 'submit' }, 'Save');
    return h('form', { class: 'agent-choice', id: 'agent-choice', onsubmit: (e) => { e.preventDefault(); this.saveChoice(); } },
      h('label', {}, 'Provider ', this.providerSel), h('label', {}, 'Model ', this.modelIn), this.choiceBtn);
  }

  showChoice(s) {
    const first = s.providers.find((p) => p.kind === 'openai') || s.providers[0];
    const opts = [h('option', { value: '' }, first ? `Server default (${first.name})` : 'None configured')];
    for (const p of s.providers) opts.push(h('option', { value: p.name }, `${p.name} (${p.kind})`));
    this.providerSel.replaceChildren(...opts);
    this.providerSel.value = s.provider;
    this.modelIn.value = s.model;
    this.modelIn.placeholder = s.default_model ? `Server default (${s.default_model})` : 'Server default';
  }

  async loadChoice() {
    try {
      this.showChoice(await call('GET', '/api/v1/me/agent'));
    } catch (err) {
      fail(err);
    }
  }

  async saveChoice() {
    this.choiceBtn.disabled = true;
    try {
      const s = await call('PUT', '/api/v1/me/agent', { body: { provider: this.providerSel.value, model: this.modelIn.value.trim() } });
      this.showChoice(s);
      say(`The agent asks ${s.provider || 'the default provider'}, model ${s.model || s.default_model || '(the default)'}, from its next turn`);
    } catch (err) {
      fail(err);
    } finally {
      this.choiceBtn.disabled = false;
    }
  }

  // shown loads the conversation the first time the pane is shown.
  shown() {
    this.choiceLoaded ||= this.loadChoice();
    this.loaded ||= this.load();
    this.input.focus();
  }

  banner(text, kind, code) {
    this.bannerEl.textContent = text;
    this.bannerEl.dataset.kind = kind;
    this.bannerEl.dataset.code = code || '';
    this.bannerEl.hidden = !text;
  }

  event(e) {
    if (e.type === 'turn') {
      const t = new Turn(this, e.turn, e.text);
      const old = this.turns.get(e.turn);
      if (old) old.el.replaceWith(t.el); else this.list.append(t.el);
      this.turns.set(e.turn, t);
      this.current = t;
      return;
    }
    (this.turns.get(e.turn) || this.current)?.event(e);
    this.list.lastElementChild?.scrollIntoView({ block: 'end' });
  }

  line(l) {
    let e;
    try { e = JSON.parse(l); } catch { e = null; }
    if (!e || !e.type) {
      this.other = (this.other + l + '\n').slice(-4096); // the harness's stderr, on a terminal
      return;
    }
    // When each event arrived, for tests to check that steps show as they happen.
    this.arrivals.push({ type: e.type, turn: e.turn, tool: e.tool, at: Date.now() });
    if (this.arrivals.length > 1000) this.arrivals.shift();
    this.event(e);
  }

  // load shows the conversation so far, then reattaches to a turn still under way.
  async load() {
    this.setRunning(true);
    try {
      await stream({ argv: [AGENT, 'code', '--history'], onLine: (l) => this.line(l) });
    } catch (err) {
      this.banner(`The conversation could not be read: ${err.message}`, 'error');
    }
    const running = localStorage.getItem(RUNNING_KEY(base));
    // The last turn never ended and this page is not following it: it was killed.
    if (!running && this.current && !this.current.el.classList.contains('done')) await this.recover();
    await this.refreshMarks();
    if (!running) {
      this.setRunning(false);
      return;
    }
    say('The agent\'s turn is still under way: showing it again');
    this.reattached = true;
    await this.follow({ attach: running });
  }

  // refreshMarks says of each turn, from the history, whether it changed no file (its
  // checkpoint is not its own: nothing to undo) or was undone (the workspace is no longer
  // at its checkpoint or past it).
  async refreshMarks() {
    let hist;
    try {
      hist = await call('GET', '/history');
    } catch { return; /* the marks are a help; the conversation is shown without them */ }
    const byID = new Map(hist.checkpoints.map((c) => [c.id, c]));
    const line = new Set();
    for (let id = hist.current; id && !line.has(id); id = byID.get(id)?.parent) line.add(id);
    for (const t of this.turns.values()) {
      if (!t.checkpoint) continue;
      const own = byID.get(t.checkpoint)?.message?.startsWith(`agent turn ${t.n}:`);
      const undone = own && !line.has(t.checkpoint);
      t.el.classList.toggle('undone', !!undone);
      t.el.classList.toggle('unchanged', !own);
      t.undoBtn.hidden = !own || undone;
      t.mark.textContent = !own ? 'this turn changed no file' : undone ? 'undone' : '';
    }
  }

  setRunning(on) {
    this.running = on;
    this.sendBtn.disabled = on;
    this.stopBtn.hidden = !on || !this.session;
  }

  async send() {
    const msg = this.input.value.trim();
    if (!msg || this.running) return;
    await (this.loaded ||= this.load());
    this.input.value = '';
    this.banner('');
    await this.follow({ argv: [AGENT, 'code', '--', msg], keep: true });
  }

  // follow runs or reattaches to a turn and shows its events until it ends.
  async follow(opts) {
    this.setRunning(true);
    const key = RUNNING_KEY(base);
    let sawError = false, sawTurn = false, sawDone = false;
    this.handle = {};
    this.other = '';
    try {
      const exit = await stream({
        ...opts,
        handle: this.handle,
        onStarted: (id) => { this.session = id; localStorage.setItem(key, id); this.setRunning(true); },
        onLine: (l) => {
          if (l.includes('"type":"error"')) sawError = true;
          if (l.includes('"type":"turn"')) sawTurn = true;
          if (l.includes('"type":"done"')) sawDone = true;
          this.line(l);
        },
      });
      if (exit.exit_code !== 0 && !sawError && !(sawTurn && !sawDone)) {
        this.banner(`The agent could not run: ${exit.error || (exit.stderr + this.other).trim() || `exit status ${exit.exit_code}`}`, 'error', 'agent');
      }
      say(exit.exit_code === 0 ? 'The agent answered' : 'The agent\'s turn stopped');
    } catch (err) {
      if (opts.attach) say('The agent\'s last turn had ended; its conversation is shown');
      else fail(err);
    } finally {
      localStorage.removeItem(key);
      this.session = null;
      this.setRunning(false);
    }
    // A turn that began and never ended: its process was killed (or its sandbox
    // restarted). Roll its changes back now, so that the workspace is at the last
    // checkpoint, and say so.
    if ((sawTurn || opts.attach) && !sawDone) await this.recover(sawTurn);
    await this.refreshMarks();
    await this.afterTurn?.();
  }

  // recover runs `paddock-agent code --recover`, which rolls back a turn left unfinished,
  // and says what became of it; stopped says that a turn this page followed stopped, even
  // when there was nothing to roll back.
  async recover(stopped = false) {
    let rec = null;
    try {
      await stream({ argv: [AGENT, 'code', '--recover'], onLine: (l) => {
        if (l.includes('"type":"recovered"')) rec = JSON.parse(l);
        this.line(l);
      } });
    } catch { /* the note is a help: the next turn rolls back all the same */ }
    if (rec) {
      this.banner(`The agent was stopped before turn ${rec.turn} ended: its changes were rolled back, and the workspace is at checkpoint ${(rec.checkpoint || '').slice(0, 12)} again. The conversation is kept.`, 'error', 'recovered');
    } else if (stopped) {
      this.banner('The agent was stopped before its turn ended. The conversation is kept.', 'error', 'stopped');
    }
  }

  // stop ends the turn under way; the turn keeps what it has done so far.
  stop() {
    const ws = this.handle?.ws;
    if (ws && ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ type: 'signal', signal: 15 }));
  }

  // undoTurn takes a turn back: undo when its checkpoint is the workspace's current one,
  // else (after asking) a restore of the checkpoint before it, which takes back what came
  // after too.
  async undoTurn(turn) {
    try {
      const hist = await call('GET', '/history');
      let res;
      if (!hist.checkpoints.find((c) => c.id === turn.checkpoint)?.message?.startsWith(`agent turn ${turn.n}:`)) {
        say(`Turn ${turn.n} changed no file: there is nothing of it to undo`);
        return;
      }
      if (hist.current === turn.checkpoint) {
        res = await call('POST', '/history/undo');
      } else {
        const cp = hist.checkpoints.find((c) => c.id === turn.checkpoint);
        if (!cp || !cp.parent) throw new Error(`turn ${turn.n}'s checkpoint is no longer in the history`);
        if (!confirm(`Changes were made after turn ${turn.n}. Undoing it takes the workspace back to before it, and those later changes go too (the timeline keeps them). Go on?`)) return;
        res = await call('POST', '/history/restore', { body: { checkpoint: cp.parent } });
      }
      await this.refreshMarks();
      say(`Turn ${turn.n} undone` + (res.app_restarted ? '; the app restarts' : ''));
      await this.afterTurn?.(res);
    } catch (e) {
      fail(e);
    }
  }
}
