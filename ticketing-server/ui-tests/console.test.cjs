// Browser tests of the console (/ui/) against a real 3-node cluster of the
// debug server, driven by playwright-core through the system Chromium.
//
//   node console.test.cjs <node_modules dir> <server binary> <out dir>
//
// Prints one line per check (PASS/FAIL/SKIP) and closes with
// "console: N passed, M failed[, K skipped]"; exits non-zero on a failure.
// Every wait is a bounded poll of a condition; every process it starts is
// stopped at the end.
'use strict';

const { createRequire } = require('node:module');
const { spawn } = require('node:child_process');
const crypto = require('node:crypto');
const fs = require('node:fs');
const http = require('node:http');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');

const [modulesDir, serverBin, outDir] = process.argv.slice(2);
const CHROMIUM = process.env.TICKETING_CHROMIUM || '/usr/bin/chromium';
const shots = path.join(outDir, 'ui-screenshots');
const logs = path.join(outDir, 'ui-tests-logs');
fs.rmSync(shots, { recursive: true, force: true });
fs.mkdirSync(shots, { recursive: true });
fs.mkdirSync(logs, { recursive: true });

let passed = 0, failed = 0, skipped = 0;
function finish(code) {
  console.log(`console: ${passed} passed, ${failed} failed` + (skipped ? `, ${skipped} skipped` : ''));
  process.exit(code);
}

// ---- helpers -------------------------------------------------------------------------
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function until(what, limitMs, fn) {
  const end = Date.now() + limitMs;
  let last;
  while (Date.now() < end) {
    try {
      last = await fn();
      if (last) return last;
    } catch (e) { last = e; }
    await sleep(100);
  }
  throw new Error(`timed out after ${limitMs} ms waiting for ${what} (last: ${last && last.message ? last.message : JSON.stringify(last)})`);
}

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => { const p = s.address().port; s.close(() => resolve(p)); });
  });
}

function getJson(port, p) {
  return new Promise((resolve) => {
    const headers = { Authorization: 'Bearer ' + adminToken };
    const req = http.get({ host: '127.0.0.1', port, path: p, timeout: 2000, headers }, (res) => {
      let b = '';
      res.on('data', (c) => (b += c));
      res.on('end', () => {
        // Keep 64-bit ids exact (as the console does).
        try { resolve({ status: res.statusCode, body: JSON.parse(b.replace(/"(id|node_id|leader_id|token)":(\d+)/g, '"$1":"$2"')) }); } catch (e) { resolve({ status: res.statusCode, body: null }); }
      });
    });
    req.on('error', () => resolve({ status: 0, body: null }));
    req.on('timeout', () => req.destroy());
  });
}

// A client connection speaking docs/protocol.md: handshake, then lines.
class Client {
  constructor(port, token) { this.port = port; this.token = token; this.lines = []; this.buf = ''; this.waiting = []; }
  connect() {
    return new Promise((resolve, reject) => {
      this.sock = net.connect(this.port, '127.0.0.1');
      this.sock.setEncoding('latin1');
      this.sock.on('error', reject);
      this.sock.on('data', (d) => {
        this.buf += d;
        let i;
        while ((i = this.buf.indexOf('\n')) >= 0) {
          const line = this.buf.slice(0, i);
          this.buf = this.buf.slice(i + 1);
          // `L <leader>` (docs/protocol.md §3) is a notification, not an answer.
          if (!line.startsWith('L ')) this.lines.push(line);
        }
        this.waiting.forEach((w) => w());
      });
      this.sock.once('connect', async () => {
        try {
          const hello = await this.next(5000);
          const snonce = hello.split(' ')[2];
          const cnonce = crypto.randomBytes(32).toString('hex');
          const mac = (who) => crypto.createHmac('sha256', this.token).update(`ticketing/1 ${who} ${snonce} ${cnonce}`).digest('hex');
          this.sock.write(`AUTH ${cnonce} ${mac('client')}\n`);
          const ok = await this.next(5000);
          if (!ok.startsWith('OK leader ') || ok.split(' ')[2] !== mac('server')) throw new Error('handshake: ' + ok);
          resolve(this);
        } catch (e) { reject(e); }
      });
    });
  }
  next(limitMs) {
    return new Promise((resolve, reject) => {
      const t = setTimeout(() => { done(); reject(new Error('no line within ' + limitMs + ' ms')); }, limitMs);
      const check = () => { if (this.lines.length) { done(); resolve(this.lines.shift()); } };
      const done = () => { clearTimeout(t); this.waiting = this.waiting.filter((w) => w !== check); };
      this.waiting.push(check);
      check();
    });
  }
  send(line) { this.sock.write(line + '\n'); }
  localAddr() { return `127.0.0.1:${this.sock.localPort}`; }
  close() { if (this.sock) this.sock.destroy(); }
}

// ---- the cluster ---------------------------------------------------------------------
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ticketing-console-'));
const clientToken = crypto.randomBytes(24).toString('hex');
fs.writeFileSync(path.join(tmp, 'peer-token'), crypto.randomBytes(24).toString('hex') + '\n', { mode: 0o600 });
fs.writeFileSync(path.join(tmp, 'client-tokens'), clientToken + '\n', { mode: 0o600 });
// The admin ports ask for a token: the console asks for it once per tab.
const adminToken = crypto.randomBytes(24).toString('hex');
fs.writeFileSync(path.join(tmp, 'admin-token'), adminToken + '\n', { mode: 0o600 });
const dialogs = [];
const asked = [];
const cspViolations = [];

// Every page of the run: script errors are collected (a 401 the console
// answers with its token form is expected, not an error), browser dialogs
// are recorded (the console opens none), and unless `answer` is false the
// console's admin-token form is answered as an operator would, whenever it
// shows (once per tab and node: the token is kept in sessionStorage).
function watch(p, answer = true) {
  p.on('console', (m) => { if (m.type() === 'error' && !/Failed to load resource/.test(m.text())) cspViolations.push(m.text()); });
  p.on('pageerror', (e) => cspViolations.push(String(e)));
  p.on('dialog', async (d) => { dialogs.push(d.message()); await d.dismiss(); });
  if (answer) {
    (async () => {
      while (!p.isClosed()) {
        try {
          if (await p.locator('#token-form #admin-token').count()) {
            asked.push(new URL(p.url()).host);
            await p.locator('#admin-token').fill(adminToken, { timeout: 2000 });
            await p.locator('#token-form button[type=submit]').click({ timeout: 2000 });
          }
        } catch (e) { /* the page navigated or closed meanwhile */ }
        await sleep(100);
      }
    })();
  }
  return p;
}
const nodes = [];
const clients = [];
let browser = null;

function startNode(i, peers) {
  const n = nodes[i];
  const args = ['--listen', `127.0.0.1:${n.client}`, '--advertise', `127.0.0.1:${n.client}`,
    '--peer-listen', `127.0.0.1:${n.peer}`, '--peers', peers, '--admin-listen', `127.0.0.1:${n.admin}`,
    '--peer-token-file', path.join(tmp, 'peer-token'), '--client-tokens-file', path.join(tmp, 'client-tokens'),
    '--admin-token-file', path.join(tmp, 'admin-token')];
  if (i === 0) args.push('--bootstrap');
  const env = { ...process.env, RUST_LOG: 'info' };
  delete env.TICKETING_PEER_TOKEN;
  delete env.TICKETING_CLIENT_TOKENS;
  const log = fs.openSync(path.join(logs, `node${i}.log`), 'w');
  n.proc = spawn(serverBin, args, { env, stdio: ['ignore', 'ignore', log] });
  n.proc.on('exit', () => { n.proc = null; });
}

function stopAll() {
  for (const c of clients) c.close();
  for (const n of nodes) if (n.proc) { try { n.proc.kill('SIGKILL'); } catch (e) { /* gone */ } }
  fs.rmSync(tmp, { recursive: true, force: true });
}

// The index of the one node whose /status says serving (and sees 3 members).
async function servingNode(among) {
  const found = [];
  for (const i of among) {
    const { body } = await getJson(nodes[i].admin, '/status');
    if (body && body.serving && body.members && body.members.length === 3) found.push({ i, id: body.node_id });
  }
  return found.length === 1 ? found[0] : null;
}

// ---- the checks ----------------------------------------------------------------------
const checks = [];
const check = (name, fn) => checks.push({ name, fn });

const KEY = 'orders/console-42';
const HOLDER = 'holder-7f3a9c2e1b';
const WAITERS = ['alpha-waiter-aa11', 'bravo-waiter-bb22'];
const prefix = (o) => o.slice(0, Math.min(8, Math.floor(o.length / 2)));
const ctx = {};

check('with an admin token the console asks for it, asks again for a wrong one, then shows the views', async () => {
  const p = watch(await browser.newPage(), false);
  try {
    const base = `http://127.0.0.1:${nodes[ctx.leader.i].admin}`;
    await p.goto(base + '/ui/');
    await until('the admin token form', 10000, async () => (await p.locator('#token-form #admin-token').count()) === 1);
    if ((await p.locator('#members tbody tr.member').count()) !== 0) throw new Error('members shown before the token was given');
    await p.screenshot({ path: path.join(shots, 'console-admin-token.png') });
    await p.locator('#admin-token').fill('not-the-admin-token');
    await p.locator('#token-form button[type=submit]').click();
    await until('the form again, saying the token was refused', 10000,
      async () => (await p.locator('#token-form #token-note.error').count()) === 1);
    await p.locator('#admin-token').fill(adminToken);
    await p.locator('#token-form button[type=submit]').click();
    await until('three member rows', 10000, async () => (await p.locator('#members tbody tr.member').count()) === 3);
    if (await p.locator('#token-form').count()) throw new Error('the form stayed after the right token');
    // Kept for the tab: the node's other pages read with it, without asking.
    await p.goto(base + '/ui/rates');
    await until('a read of the rates page answered', 10000, async () => /^live/.test(await p.locator('#conn').textContent()));
    if (await p.locator('#token-form').count()) throw new Error('asked again on another page of the same node');
  } finally {
    await p.close();
  }
});

check('cluster page on the leader shows three members and the leader highlighted', async () => {
  const { page } = ctx;
  await page.goto(`http://127.0.0.1:${nodes[ctx.leader.i].admin}/ui/`);
  await until('three member rows', 10000, async () => (await page.locator('#members tbody tr.member').count()) === 3);
  const leaderRows = page.locator('#members tbody tr.leader');
  await until('one highlighted leader row', 5000, async () => (await leaderRows.count()) === 1);
  const rowId = await leaderRows.getAttribute('data-node-id');
  const shown = (await page.locator('#leader').textContent()).trim();
  if (rowId !== ctx.leader.id || shown !== ctx.leader.id) throw new Error(`leader row ${rowId}, shown ${shown}, /status ${ctx.leader.id}`);
  const serving = await page.locator('#serving').getAttribute('data-serving');
  if (serving !== 'true') throw new Error('the leader page does not say serving');
  const domain = (await page.locator('#domain').textContent()).trim();
  if (!/^[0-9a-f]{32}$/.test(domain)) throw new Error('domain: ' + domain);
  await page.screenshot({ path: path.join(shots, 'console-cluster.png'), fullPage: true });
});

check('locks page shows the holder prefix, a running countdown and the two waiters in FIFO order', async () => {
  const { page } = ctx;
  const port = nodes[ctx.leader.i].client;
  const holder = await new Client(port, clientToken).connect();
  clients.push(holder);
  holder.send(`A 1 ${KEY} ${HOLDER} 0 60`);
  const granted = await holder.next(5000);
  if (!granted.startsWith(`A 1 ${KEY} ${HOLDER} `)) throw new Error('holder not granted: ' + granted);
  const token = granted.split(' ')[4];
  const addrs = [];
  for (const [n, w] of WAITERS.entries()) {
    const c = await new Client(port, clientToken).connect();
    clients.push(c);
    c.send(`A 1 ${KEY} ${w} 60 30`);
    addrs.push(c.localAddr());
    // The next waiter queues only once this one is queued: the FIFO order is known.
    await until(`waiter ${n + 1} queued`, 5000, async () => {
      const { body } = await getJson(nodes[ctx.leader.i].admin, '/locks/' + KEY);
      return body && body.waiters && body.waiters.length === n + 1;
    });
  }
  await page.goto(`http://127.0.0.1:${nodes[ctx.leader.i].admin}/ui/locks/${KEY}`);
  const owner = page.locator('#holder-owner');
  await until('the holder prefix', 5000, async () => (await owner.textContent()).trim() === prefix(HOLDER));
  const text = await page.locator('body').textContent();
  if (text.includes(HOLDER)) throw new Error('the full owner is on the page');
  if ((await page.locator('#holder-token').textContent()).trim() !== token) throw new Error('token differs');
  const left = async () => Number(await page.locator('#holder-left').getAttribute('data-remaining-ms'));
  const first = await left();
  if (!(first > 0 && first <= 60000)) throw new Error('countdown ' + first);
  await until('the countdown to run', 5000, async () => (await left()) < first - 300);
  const rows = page.locator('#waiters li.waiter');
  await until('two waiter rows', 5000, async () => (await rows.count()) === 2);
  for (let n = 0; n < 2; n++) {
    const got = await rows.nth(n).getAttribute('data-owner-prefix');
    const client = (await rows.nth(n).locator('.client').textContent()).trim();
    if (got !== prefix(WAITERS[n]) || client !== addrs[n]) throw new Error(`waiter ${n + 1}: ${got} ${client}, want ${prefix(WAITERS[n])} ${addrs[n]}`);
  }
  const hot = page.locator(`#contended tr[data-key="${KEY}"] td:nth-child(2)`);
  await until('the key among the most contended', 5000, async () => (await hot.count()) === 1 && (await hot.textContent()).trim() === '2');
  await page.screenshot({ path: path.join(shots, 'console-locks.png'), fullPage: true });
});

check('locks page on a follower reads the leader: same holder and waiters, and a link to the leader', async () => {
  const page = ctx.page2;
  const f = ctx.followers[0];
  await page.goto(`http://127.0.0.1:${nodes[f].admin}/ui/locks/${KEY}`);
  const link = page.locator('#leader-link');
  const want = `http://127.0.0.1:${nodes[ctx.leader.i].admin}/ui/locks/${KEY}`;
  await until('the link to the leader', 5000, async () => (await link.count()) === 1 && (await link.getAttribute('href')) === want);
  await until('the holder read from the leader', 5000, async () => (await page.locator('#holder-owner').textContent()).trim() === prefix(HOLDER));
  const rows = page.locator('#waiters li.waiter');
  await until('the two waiters read from the leader', 5000, async () => (await rows.count()) === 2
    && (await rows.nth(0).getAttribute('data-owner-prefix')) === prefix(WAITERS[0])
    && (await rows.nth(1).getAttribute('data-owner-prefix')) === prefix(WAITERS[1]));
});

check('rates page draws the charts from the series', async () => {
  const { page } = ctx;
  // Some traffic for the charts: grants and releases on another key.
  const c = await new Client(nodes[ctx.leader.i].client, clientToken).connect();
  clients.push(c);
  for (let n = 1; n <= 20; n++) {
    c.send(`A ${n} rates/k rater-${n}-xyz 1 5`);
    const a = (await c.next(5000)).split(' ');
    c.send(`R ${n} rates/k rater-${n}-xyz ${a[4]}`);
    await c.next(5000);
  }
  await page.goto(`http://127.0.0.1:${nodes[ctx.leader.i].admin}/ui/rates`);
  await until('grants drawn', 8000, async () => (await page.locator('#chart-answers path.line').count()) >= 1);
  await until('the raft chart shown', 5000, async () => page.locator('#chart-raft').isVisible());
  const legend = await page.locator('#chart-queues .legend').textContent();
  if (!/waiters 2\.00/.test(legend)) throw new Error('waiters legend: ' + legend);
  await page.screenshot({ path: path.join(shots, 'console-rates.png'), fullPage: true });
});

check('phone-sized dark page stays readable', async () => {
  const p = watch(await browser.newPage());
  await p.setViewportSize({ width: 390, height: 844 });
  await p.emulateMedia({ colorScheme: 'dark' });
  await p.goto(`http://127.0.0.1:${nodes[ctx.leader.i].admin}/ui/locks/${KEY}`);
  await until('the waiters', 5000, async () => (await p.locator('#waiters li.waiter').count()) === 2);
  const overflow = await p.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  if (overflow > 1) throw new Error(`the page is ${overflow}px wider than the phone`);
  const bg = await p.evaluate(() => getComputedStyle(document.body).backgroundColor);
  if (bg !== 'rgb(18, 19, 22)') throw new Error('not the dark background: ' + bg);
  await p.screenshot({ path: path.join(shots, 'console-phone-dark.png') });
  await p.close();
});

check('kill -9 the leader: the page on a survivor shows the new leader', async () => {
  const page = ctx.page2;
  const f = ctx.followers[0];
  await page.goto(`http://127.0.0.1:${nodes[f].admin}/ui/`);
  const leader = page.locator('#leader');
  await until('the old leader shown on the follower', 5000, async () => (await leader.textContent()).trim() === ctx.leader.id);
  const link = page.locator('#leader-link');
  await until('the follow link', 5000, async () => (await link.count()) === 1);
  nodes[ctx.leader.i].proc.kill('SIGKILL');
  const started = Date.now();
  const survivors = ctx.followers;
  const next = await until('a new serving leader', 20000, () => servingNode(survivors));
  await until('the new leader on the page', 20000, async () => {
    const shown = (await leader.textContent()).trim();
    const row = page.locator('#members tbody tr.leader');
    return shown === next.id && (await row.count()) === 1 && (await row.getAttribute('data-node-id')) === next.id;
  });
  console.log(`  (the page showed the new leader ${Date.now() - started} ms after the kill)`);
  await page.screenshot({ path: path.join(shots, 'console-failover.png'), fullPage: true });
  ctx.newLeader = next;
});

check('after the failover the locks page on a survivor shows the holder from the new leader', async () => {
  const page = ctx.page2;
  const other = ctx.followers.find((i) => i !== ctx.newLeader.i);
  await page.goto(`http://127.0.0.1:${nodes[other].admin}/ui/locks/${KEY}`);
  const want = `http://127.0.0.1:${nodes[ctx.newLeader.i].admin}/ui/locks/${KEY}`;
  await until('the link to the new leader', 10000, async () => (await page.locator('#leader-link').count()) === 1
    && (await page.locator('#leader-link').getAttribute('href')) === want);
  // The grant is in the replicated state: the new leader keeps it until its lease ends.
  await until('the holder kept across the failover', 10000, async () => (await page.locator('#holder-owner').textContent()).trim() === prefix(HOLDER));
});

check('the console asked for the admin token with its form, and the data endpoints refuse a read without it', async () => {
  if (dialogs.length) throw new Error('browser dialogs: ' + JSON.stringify(dialogs));
  if (!asked.length) throw new Error('the token form never showed');
  // At most one question per tab and node (each node's console is its own
  // origin): 3 tabs, 3 nodes; never one per read.
  if (asked.length > 9) throw new Error(`asked ${asked.length} times: ${asked.join(' ')}`);
  const res = await new Promise((resolve) => {
    http.get({ host: '127.0.0.1', port: nodes[ctx.newLeader.i].admin, path: '/status', timeout: 2000 }, (r) => { r.resume(); resolve(r.statusCode); })
      .on('error', () => resolve(0));
  });
  if (res !== 401) throw new Error('/status without the token answered ' + res);
});

// ---- main ----------------------------------------------------------------------------
(async () => {
  if (!fs.existsSync(CHROMIUM)) {
    console.log(`SKIP console: no browser at ${CHROMIUM}`);
    skipped = checks.length;
    finish(0);
  }
  let chromium;
  try {
    ({ chromium } = createRequire(path.join(modulesDir, 'x.js'))('playwright-core'));
  } catch (e) {
    console.log('SKIP console: playwright-core is not installed: ' + e.message);
    skipped = checks.length;
    finish(0);
  }
  const timer = setTimeout(() => { console.log('FAIL console: the whole run exceeded 180 s'); failed++; stopAll(); finish(1); }, 180000);
  try {
    for (let i = 0; i < 3; i++) nodes.push({ client: await freePort(), peer: await freePort(), admin: await freePort() });
    const peers = nodes.map((n) => `127.0.0.1:${n.peer}`).join(',');
    for (let i = 0; i < 3; i++) startNode(i, peers);
    ctx.leader = await until('one serving leader with three members', 30000, () => servingNode([0, 1, 2]));
    ctx.followers = [0, 1, 2].filter((i) => i !== ctx.leader.i);
    const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'ticketing-chromium-'));
    // A fresh profile (--user-data-dir) per run.
    const context = await chromium.launchPersistentContext(profile, {
      executablePath: CHROMIUM,
      headless: true,
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
        '--disable-component-update', '--disable-sync'],
      viewport: { width: 1280, height: 820 },
      colorScheme: 'light',
    });
    browser = context;
    ctx.page = await context.newPage();
    ctx.page2 = await context.newPage();
    for (const p of [ctx.page, ctx.page2]) watch(p);
    for (const c of checks) {
      try {
        await c.fn();
        passed++;
        console.log('PASS ' + c.name);
      } catch (e) {
        failed++;
        console.log('FAIL ' + c.name + ': ' + (e && e.message ? e.message : e));
        try { await ctx.page.screenshot({ path: path.join(shots, 'failed-' + passed + failed + '.png') }); } catch (x) { /* ignore */ }
      }
    }
    if (cspViolations.length) {
      failed++;
      console.log('FAIL no script errors or CSP violations in the pages: ' + cspViolations.slice(0, 3).join(' | '));
    } else {
      passed++;
      console.log('PASS no script errors or CSP violations in the pages');
    }
    await context.close();
    fs.rmSync(profile, { recursive: true, force: true });
  } catch (e) {
    failed++;
    console.log('FAIL console setup: ' + (e && e.stack ? e.stack : e));
  }
  clearTimeout(timer);
  stopAll();
  finish(failed ? 1 : 0);
})();
