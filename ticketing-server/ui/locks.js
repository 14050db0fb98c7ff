// Locks page: a key's holder and FIFO waiters (/locks/<key>), and the most contended keys.
'use strict';

const PREFIX = '/ui/locks/';
const keyPath = (k) => k.split('/').map(encodeURIComponent).join('/');
const currentKey = () => {
  const p = location.pathname;
  if (!p.startsWith(PREFIX) || p.length === PREFIX.length) return null;
  try { return decodeURIComponent(p.slice(PREFIX.length)); } catch (e) { return null; }
};

let last = null; // { at, body } of the last /locks answer

// Read through this node from the leader (a follower): say so, and link to the leader's page.
function viaLeader(addr, path) {
  const n = document.getElementById('follow');
  n.replaceChildren('This node is not the leader; holders and waiters are read from the leader at ',
    T.el('span', { class: 'mono', text: addr }), '. ');
  const url = T.adminUrl(addr, path);
  if (url) n.append(T.el('a', { id: 'leader-link', href: url, text: 'Open this page on the leader' }), '.');
  n.hidden = false;
}

function notice(body, path) {
  const n = document.getElementById('follow');
  if (!body || body.error !== 'not the leader') { n.hidden = true; return; }
  n.replaceChildren('Only the leader knows who holds and who waits; this node is not it. ');
  const url = T.adminUrl(body.leader_admin, path);
  if (url) n.append(T.el('a', { id: 'leader-link', href: url, text: 'Open this page on the leader' }), '.');
  else if (body.leader) n.append('The leader (client address ' + body.leader + ') announced no admin address.');
  else n.append('No leader is known right now.');
  n.hidden = false;
}

// How a waiter asked: nothing for an exclusive acquire, else its n or its keys.
function kind(w) {
  if (w.kind === 'shared') return ' · shared n=' + w.n;
  if (w.kind === 'all') return ' · all of ' + (w.keys || []).join(' ');
  return '';
}

// Redraws the holder and waiters from the last answer, moved on by the time since.
function draw() {
  if (!last) return;
  const since = Date.now() - last.at;
  const b = last.body;
  const h = b.holder;
  // Counted holders (a semaphore or readers): every one, with its slot.
  const all = b.holders || (h ? [h] : []);
  const owners = all.length > 1 || (h && h.slot != null)
    ? all.map((x) => x.owner_prefix + ' (slot ' + x.slot + ')').join(', ')
    : (h ? h.owner_prefix : 'nobody holds this key');
  T.setText('holder-owner', owners);
  T.setText('holder-token', h ? h.token : null);
  const left = T.setText('holder-left', h ? T.dur(Math.max(0, h.remaining_ms - since)) : null);
  left.dataset.remainingMs = h ? String(Math.max(0, h.remaining_ms - since)) : '';
  T.setText('holder-granted', h ? h.granted_dt + ' ms' : null);
  const ol = document.getElementById('waiters');
  const head = T.el('li', { class: 'head' }, T.el('span', { text: 'owner' }), T.el('span', { class: 'client', text: 'client' }),
    T.el('span', { text: 'waited' }), T.el('span', { text: 'wait left' }));
  const rows = b.waiters.map((w) => T.el('li', { class: 'waiter', 'data-owner-prefix': w.owner_prefix },
    T.el('span', { class: 'mono owner', text: w.owner_prefix + kind(w) }),
    T.el('span', { class: 'mono client', text: w.client }),
    T.el('span', { class: 'waited', text: T.dur(w.waited_ms + since) }),
    T.el('span', { class: 'left', text: T.dur(Math.max(0, w.wait_left_ms - since)) })));
  ol.replaceChildren(head, ...(rows.length ? rows : [T.el('li', { class: 'muted', text: 'no waiters' })]));
  T.setText('waiter-count', '(' + b.waiters.length + ')');
}

async function refreshKey(key) {
  const { status, body, headers } = await T.get('/ui/api/locks/' + keyPath(key));
  const section = document.getElementById('lock');
  section.hidden = false;
  T.setText('lock-key', key);
  if (status === 200 && body) {
    const via = headers.get('x-ticketing-leader-admin');
    if (via) viaLeader(via, PREFIX + keyPath(key)); else notice(null);
    last = { at: Date.now(), body };
    draw();
    return;
  }
  last = null;
  notice(body, PREFIX + keyPath(key));
  T.setText('holder-owner', body && body.error ? body.error : 'no answer');
  for (const id of ['holder-token', 'holder-left', 'holder-granted']) T.setText(id, null);
  document.getElementById('waiters').replaceChildren();
  T.setText('waiter-count', '');
}

async function refreshContended() {
  const { status, body, headers } = await T.get('/ui/api/contended?n=10');
  const tb = document.querySelector('#contended tbody');
  if (status !== 200 || !body) {
    if (!currentKey()) notice(body, '/ui/locks');
    tb.replaceChildren(T.el('tr', {}, T.el('td', { colspan: 2, class: 'muted', text: body && body.error === 'not the leader'
      ? 'known on the leader' : 'not available' })));
    return;
  }
  if (!currentKey()) {
    const via = headers.get('x-ticketing-leader-admin');
    if (via) viaLeader(via, '/ui/locks'); else notice(null);
  }
  tb.replaceChildren(...(body.keys.length ? body.keys.map((k) => T.el('tr', { 'data-key': k.key },
    T.el('td', { class: 'mono' }, T.el('a', { href: PREFIX + keyPath(k.key), text: k.key })),
    T.el('td', { text: k.waiters }))) : [T.el('tr', {}, T.el('td', { colspan: 2, class: 'muted', text: 'no key has waiters' }))]));
}

document.addEventListener('DOMContentLoaded', () => {
  const key = currentKey();
  const input = document.getElementById('key');
  if (key) input.value = key;
  document.getElementById('search').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const k = input.value.trim();
    if (k) location.href = PREFIX + keyPath(k);
  });
  if (key) {
    document.title = key + ' · Locks · Ticketing console';
    T.every(1000, () => refreshKey(key));
    setInterval(draw, 200);
  }
  T.every(2000, refreshContended);
});
