// Ticketing console: helpers shared by every page (no framework, no build step).
'use strict';

const T = (() => {
  // Node ids and tokens are 64-bit integers: keep them as text, a JS number would round them.
  const BIG = /"(id|node_id|leader_id|token|last_token)":(\d+)/g;
  let lastOk = 0;

  function setConn(ok, note) {
    const c = document.getElementById('conn');
    if (!c) return;
    if (ok) {
      lastOk = Date.now();
      c.className = '';
      c.textContent = 'live · ' + new Date(lastOk).toLocaleTimeString();
    } else {
      c.className = 'down';
      c.textContent = note || 'cannot reach this node';
    }
  }

  // The admin token (docs/security.md, "The admin port"): asked for with a
  // small form when the node answers 401, kept in sessionStorage (this tab
  // and this node only), sent as a Bearer token with every read, asked for
  // again when the node refuses it.
  const TOKEN = 'ticketing-admin-token';
  let asking = null;
  function askToken(refused) {
    if (asking) return asking;
    asking = new Promise((resolve) => {
      const input = el('input', { id: 'admin-token', type: 'password', autocomplete: 'off', required: true,
        spellcheck: 'false', 'aria-describedby': 'token-note' });
      const note = el('p', { id: 'token-note', class: refused ? 'error' : 'muted',
        text: refused ? 'This admin port refused that token: enter a current one.'
          : 'It is kept for this tab only and sent with every read of this node.' });
      const form = el('form', { id: 'token-form', class: 'card token', autocomplete: 'off' },
        el('label', { for: 'admin-token', text: 'This admin port needs its admin token' }),
        el('div', { class: 'row' }, input, el('button', { type: 'submit', text: 'Open the console' })),
        note);
      form.addEventListener('submit', (ev) => {
        ev.preventDefault();
        const t = input.value.trim();
        if (!t) return;
        sessionStorage.setItem(TOKEN, t);
        form.remove();
        asking = null;
        resolve();
      });
      const main = document.querySelector('main') || document.body;
      main.prepend(form);
      input.focus();
      setConn(false, 'waiting for the admin token');
    });
    return asking;
  }

  // GET a JSON endpoint of this node: {status, body} (status 0: unreachable).
  // On a 401 it waits for the admin token (the form above) and reads again.
  async function get(path) {
    try {
      let r = null;
      for (;;) {
        const headers = { Accept: 'application/json' };
        const token = sessionStorage.getItem(TOKEN);
        if (token) headers.Authorization = 'Bearer ' + token;
        r = await fetch(path, { cache: 'no-store', headers });
        if (r.status !== 401) break;
        // Another read may have replaced the token meanwhile: only a refused
        // token is dropped, and then the form asks again.
        if (token && sessionStorage.getItem(TOKEN) === token) sessionStorage.removeItem(TOKEN);
        if (!sessionStorage.getItem(TOKEN)) await askToken(Boolean(token));
      }
      const text = await r.text();
      let body = null;
      try { body = JSON.parse(text.replace(BIG, '"$1":"$2"')); } catch (e) { body = null; }
      setConn(true);
      return { status: r.status, body, headers: r.headers };
    } catch (e) {
      setConn(false);
      return { status: 0, body: null, headers: new Headers() };
    }
  }

  // el('td', {class: 'x', 'data-a': 1}, 'text', child...)
  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'text') e.textContent = String(v);
      else e.setAttribute(k, v === true ? '' : String(v));
    }
    for (const k of kids) e.append(k instanceof Node ? k : document.createTextNode(String(k)));
    return e;
  }

  function setText(id, v) {
    const e = document.getElementById(id);
    if (e) e.textContent = v === undefined || v === null || v === '' ? '—' : String(v);
    return e;
  }

  // 1234 -> "1.2 s", 65000 -> "1 min 5 s".
  function dur(ms) {
    if (ms === undefined || ms === null) return '—';
    if (ms < 1000) return Math.round(ms) + ' ms';
    if (ms < 60000) return (ms / 1000).toFixed(1) + ' s';
    const m = Math.floor(ms / 60000);
    return m + ' min ' + Math.floor((ms % 60000) / 1000) + ' s';
  }

  // The URL of another node's console page; an unspecified host (0.0.0.0, [::]) becomes this page's host.
  function adminUrl(addr, path) {
    if (!addr) return null;
    let a = String(addr);
    const m = a.match(/^(\[[^\]]*\]|[^:]*):(\d+)$/);
    if (!m) return null;
    let host = m[1];
    if (host === '0.0.0.0' || host === '[::]' || host === '') host = location.hostname.includes(':') ? '[' + location.hostname + ']' : location.hostname;
    return location.protocol + '//' + host + ':' + m[2] + path;
  }

  // The leader's admin address as a /status body knows it (cluster mode), or null.
  function leaderAdmin(status) {
    if (!status || !status.members || !status.leader_id) return null;
    const m = status.members.find((x) => x.id === status.leader_id);
    return m ? m.admin : null;
  }

  // Shows (or hides) the "open this on the leader" notice of a page.
  function follow(status, path) {
    const n = document.getElementById('follow');
    if (!n) return;
    if (!status || status.mode !== 'cluster' || status.serving) { n.hidden = true; return; }
    n.replaceChildren();
    if (status.leader_id && status.leader_id !== status.node_id) {
      const url = adminUrl(leaderAdmin(status), path);
      n.append('This node is a ' + status.role + '. The leader is node ');
      n.append(el('span', { class: 'mono', text: status.leader_id }));
      if (url) {
        n.append(': ');
        n.append(el('a', { id: 'leader-link', href: url, text: 'open the leader\u2019s console' }));
      } else {
        n.append(' (its admin address is not known: it runs without --admin-listen).');
      }
    } else {
      n.append('This node is not serving and knows no leader yet (an election may be running).');
    }
    n.hidden = false;
  }

  // Calls fn now and then every ms milliseconds after it settles.
  function every(ms, fn) {
    const run = async () => {
      try { await fn(); } catch (e) { console.error(e); }
      setTimeout(run, ms);
    };
    run();
  }

  function markNav() {
    const page = document.body.dataset.page;
    for (const a of document.querySelectorAll('nav a')) {
      if (a.dataset.nav === page) a.setAttribute('aria-current', 'page');
    }
  }
  document.addEventListener('DOMContentLoaded', markNav);

  return { get, el, setText, dur, adminUrl, leaderAdmin, follow, every, setConn };
})();
