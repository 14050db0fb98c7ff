// Rates page: hand-made SVG line charts of /ui/api/series (one sample a second, last minutes).
'use strict';

const SVG = 'http://www.w3.org/2000/svg';
const CHARTS = [
  { id: 'answers', title: 'Grants, releases, expiries /s', unit: '/s',
    series: [['grants', 'grants'], ['releases', 'releases'], ['expiries', 'expiries']] },
  { id: 'refusals', title: 'Acquires answered T (timeout) and B (busy) /s', unit: '/s',
    series: [['timeouts', 'T'], ['busy', 'B']] },
  { id: 'wait', title: 'Acquire to grant, percentiles of the second (ms)', unit: ' ms',
    series: [['wait_p50_ms', 'p50'], ['wait_p90_ms', 'p90'], ['wait_p99_ms', 'p99']] },
  { id: 'queues', title: 'Waiters and keys held', unit: '',
    series: [['waiters', 'waiters'], ['held_keys', 'keys held']] },
  { id: 'connections', title: 'Client connections', unit: '', series: [['connections', 'connections']] },
  { id: 'raft', title: 'Raft log entries committed /s', unit: '/s', series: [['raft_commits', 'entries']], cluster: true },
  { id: 'commit', title: 'Raft commit of a batch, percentiles of the second (ms, leader)', unit: ' ms',
    series: [['commit_p50_ms', 'p50'], ['commit_p99_ms', 'p99']], cluster: true },
];

function svgEl(tag, attrs) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  return e;
}

function fmt(v, unit) {
  if (v === null || v === undefined) return '—';
  const a = Math.abs(v);
  const s = a >= 100 ? v.toFixed(0) : a >= 10 ? v.toFixed(1) : v.toFixed(2);
  return s + unit;
}

function niceMax(v) {
  if (!(v > 0)) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 2.5, 5, 10]) if (v <= m * p) return m * p;
  return 10 * p;
}

function setup() {
  const root = document.getElementById('charts');
  for (const c of CHARTS) {
    const legend = T.el('div', { class: 'legend' });
    c.series.forEach(([key, label], i) => legend.append(T.el('span', { class: 's' + (i + 1), 'data-series': key, text: label })));
    const svg = svgEl('svg', { role: 'img', 'aria-label': c.title });
    const card = T.el('section', { class: 'card chart', id: 'chart-' + c.id }, T.el('h2', { text: c.title }), legend);
    card.append(svg);
    c.svg = svg; c.legend = legend; c.card = card;
    root.append(card);
  }
}

function drawChart(c, samples, capacity, intervalMs) {
  const w = Math.max(200, c.svg.clientWidth || 320), h = 150;
  const L = 40, R = 6, Tp = 8, B = 18;
  c.svg.setAttribute('viewBox', '0 0 ' + w + ' ' + h);
  c.svg.replaceChildren();
  let max = 0;
  for (const [key] of c.series) for (const s of samples) if (s[key] !== null && s[key] > max) max = s[key];
  max = niceMax(max);
  for (let i = 0; i <= 3; i++) {
    const y = Tp + ((h - Tp - B) * i) / 3;
    c.svg.append(svgEl('line', { class: 'grid', x1: L, x2: w - R, y1: y, y2: y }));
    const t = svgEl('text', { class: 'axis', x: L - 4, y: y + 3, 'text-anchor': 'end' });
    t.textContent = fmt((max * (3 - i)) / 3, '').replace(/\.00$/, '');
    c.svg.append(t);
  }
  const span = capacity * intervalMs;
  const now = samples.length ? samples[samples.length - 1].t_ms : Date.now();
  for (const [label, x] of [['-' + Math.round(span / 60000) + ' min', L], ['now', w - R]]) {
    const t = svgEl('text', { class: 'axis', x, y: h - 4, 'text-anchor': x === L ? 'start' : 'end' });
    t.textContent = label;
    c.svg.append(t);
  }
  const X = (t) => L + ((w - L - R) * (t - (now - span))) / span;
  const Y = (v) => Tp + (h - Tp - B) * (1 - v / max);
  c.series.forEach(([key], i) => {
    let d = '', pen = false;
    for (const s of samples) {
      const v = s[key];
      if (v === null || v === undefined) { pen = false; continue; }
      d += (pen ? 'L' : 'M') + X(s.t_ms).toFixed(1) + ' ' + Y(v).toFixed(1);
      pen = true;
    }
    if (d) c.svg.append(svgEl('path', { class: 'line s' + (i + 1), d }));
  });
  const lastS = samples[samples.length - 1] || {};
  for (const span of c.legend.querySelectorAll('span')) {
    const key = span.dataset.series;
    const label = c.series.find((s) => s[0] === key)[1];
    span.textContent = label + ' ' + fmt(lastS[key], c.unit);
  }
}

async function refresh() {
  const { status, body } = await T.get('/ui/api/series');
  if (status !== 200 || !body) return;
  const s = body.samples;
  const cluster = s.some((x) => x.raft_commits !== null && x.raft_commits !== undefined);
  for (const c of CHARTS) {
    c.card.hidden = !!c.cluster && !cluster;
    if (!c.card.hidden) drawChart(c, s, body.capacity, body.interval_ms);
  }
}

async function followNotice() {
  const { body } = await T.get('/status');
  if (body) T.follow(body, '/ui/rates');
}

document.addEventListener('DOMContentLoaded', () => {
  setup();
  T.every(1000, refresh);
  T.every(5000, followNotice);
});
