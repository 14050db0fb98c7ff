// Cluster page: this node's /status, every member, the leader highlighted.
'use strict';

function whyNotServing(s) {
  if (s.mode !== 'cluster') return s.serving ? 'standalone: serves every request' : 'not serving';
  if (s.serving) return 'leader with a live quorum';
  if (!s.active) return 'not active: no fencing domain yet, or not a member';
  if (s.role === 'leader') return 'leader without a live quorum, or not caught up yet';
  if (!s.leader_id) return 'no leader known (an election may be running)';
  return 'a ' + s.role + ': the leader serves';
}

function memberRow(s, m) {
  const isLeader = s.leader_id !== null && s.leader_id !== undefined && m.id === s.leader_id;
  const isSelf = m.id === s.node_id;
  let role = isLeader ? 'leader' : m.voter ? 'follower' : 'learner';
  if (isSelf) role = s.role;
  const roleCell = T.el('td', { class: 'role' },
    T.el('span', { class: 'badge' + (isLeader ? ' lead' : ''), text: role }));
  const idCell = T.el('td', { class: 'mono node-id' }, m.id);
  if (isSelf) idCell.append(' ', T.el('span', { class: 'badge', text: 'this node' }));
  const url = T.adminUrl(m.admin, '/ui/');
  const adminCell = T.el('td', { class: 'mono' }, url && !isSelf ? T.el('a', { href: url, text: m.admin }) : (m.admin || '—'));
  const index = isSelf ? s.applied_index : m.matched_index;
  const ack = isLeader && s.millis_since_quorum_ack !== null && s.millis_since_quorum_ack !== undefined
    ? T.dur(s.millis_since_quorum_ack) : '—';
  return T.el('tr', { class: 'member' + (isLeader ? ' leader' : ''), 'data-node-id': m.id, 'data-role': role },
    idCell, roleCell,
    T.el('td', { text: m.voter ? 'voter' : 'learner' }),
    T.el('td', { class: 'mono', text: m.client }),
    T.el('td', { class: 'mono', text: m.peer }),
    adminCell,
    T.el('td', { class: 'mono', text: index === null || index === undefined ? '—' : index }),
    T.el('td', { text: ack }));
}

async function refresh() {
  const { status, body: s } = await T.get('/status');
  if (!s) { if (status) T.setConn(false, '/status answered ' + status); return; }
  const cluster = s.mode === 'cluster';
  T.setText('mode', cluster ? 'cluster' : 'standalone');
  T.setText('domain', cluster ? (s.domain || 'none yet') : 'standalone');
  T.setText('self', cluster ? s.node_id + ' (' + s.role + ')' : 'standalone');
  const leader = T.setText('leader', cluster ? (s.leader_id || 'unknown') : 'this node');
  leader.dataset.leaderId = cluster && s.leader_id ? s.leader_id : '';
  const serving = document.getElementById('serving');
  serving.replaceChildren(
    T.el('span', { class: 'badge ' + (s.serving ? 'ok' : 'bad'), text: s.serving ? 'serving' : 'not serving' }),
    ' ', T.el('span', { class: 'muted', text: whyNotServing(s) }));
  serving.dataset.serving = String(!!s.serving);
  T.setText('term', cluster ? s.term : '—');
  T.setText('indexes', cluster ? (s.commit_index ?? '—') + ' / ' + (s.applied_index ?? '—') : '—');
  T.setText('quorum', cluster && s.millis_since_quorum_ack !== null && s.millis_since_quorum_ack !== undefined
    ? T.dur(s.millis_since_quorum_ack) : cluster ? 'known on the leader' : '—');
  T.setText('held', s.held_keys + ' / ' + s.last_token);
  const members = cluster ? s.members : [{ id: 'standalone', client: s.leader || '—', peer: '—', admin: location.host, voter: true }];
  const tb = document.querySelector('#members tbody');
  tb.replaceChildren(...members.map((m) => cluster ? memberRow(s, m)
    : T.el('tr', { class: 'member leader', 'data-role': 'leader' }, T.el('td', { text: 'standalone' }),
      T.el('td', {}, T.el('span', { class: 'badge lead', text: 'leader' })), T.el('td', { text: '—' }),
      T.el('td', { class: 'mono', text: m.client }), T.el('td', { text: '—' }), T.el('td', { class: 'mono', text: m.admin }),
      T.el('td', { text: '—' }), T.el('td', { text: '—' }))));
  T.setText('member-count', '(' + members.length + ')');
  T.follow(s, '/ui/');
}

T.every(1000, refresh);
