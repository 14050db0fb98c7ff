'use strict';
// A ticket seller in Node: sells seats of one event until none is left.
//
// Each sale: take the lock on the event key, read the stock, then in ONE
// database transaction guarded by the fence (docs/fencing.md) record the seat
// and decrement the stock; commit; release. Run by examples/ticket-sale/demo;
// the arguments are described in examples/README.md.
// SQLite: better-sqlite3@12 (13 crashes on Node 20); PostgreSQL: pg.

const readline = require('node:readline');
const { parseArgs } = require('node:util');
const { TicketBroker, TicketingError } = require('ticketing');

// SQLite (WAL; the demo created the tables). better-sqlite3 is synchronous.
class SqliteStore {
  constructor(path) {
    const Database = require('better-sqlite3');
    this.db = new Database(path, { timeout: 30000 });
    this.readStmt = this.db.prepare('SELECT remaining, seats FROM stock WHERE event = ?');
    this.fenceInsert = this.db.prepare('INSERT OR IGNORE INTO fence (key, high_water) VALUES (?, 0)');
    this.fenceUpdate = this.db.prepare('UPDATE fence SET high_water = ? WHERE key = ? AND high_water < ?');
    this.saleInsert = this.db.prepare('INSERT INTO sales (event, seat, token, seller) VALUES (?, ?, ?, ?)');
    this.stockUpdate = this.db.prepare('UPDATE stock SET remaining = ? WHERE event = ?');
    // .immediate: takes SQLite's write lock at BEGIN, so the fence check and
    // the writes see one state and commit together; a throw rolls back.
    this.saleTx = this.db.transaction((event, token, seat, remaining, seller, fence) => {
      if (fence) {
        this.fenceInsert.run(event);
        if (this.fenceUpdate.run(token, event, token).changes === 0) throw new Stale();
      }
      this.saleInsert.run(event, seat, token, seller);
      this.stockUpdate.run(remaining - 1, event);
    });
  }

  async readStock(event) {
    const row = this.readStmt.get(event);
    if (!row) throw new Error(`no stock row for ${event}`);
    return [Number(row.remaining), Number(row.seats)];
  }

  // Records the sale and sets the stock to remaining - 1 in ONE transaction
  // with the fence. false: the token is stale; nothing was written.
  async sell(event, token, seat, remaining, seller, fence) {
    try {
      // better-sqlite3 binds a bigint as a 64-bit integer: the token stays exact.
      this.saleTx.immediate(event, token, seat, remaining, seller, fence);
      return true;
    } catch (e) {
      if (e instanceof Stale) return false;
      throw e;
    }
  }

  async close() {
    this.db.close();
  }
}

// PostgreSQL (READ COMMITTED: the fence UPDATE re-checks high_water < token
// on the latest row version after waiting for a concurrent writer).
class PostgresStore {
  constructor(url) {
    const { Client } = require('pg');
    this.db = new Client({ connectionString: url });
    this.connected = this.db.connect();
  }

  async readStock(event) {
    await this.connected;
    const r = await this.db.query('SELECT remaining, seats FROM stock WHERE event = $1', [event]);
    if (r.rowCount === 0) throw new Error(`no stock row for ${event}`);
    return [Number(r.rows[0].remaining), Number(r.rows[0].seats)];
  }

  async sell(event, token, seat, remaining, seller, fence) {
    await this.connected;
    const tok = token.toString(); // a bigint, exact as text for BIGINT
    await this.db.query('BEGIN');
    try {
      if (fence) {
        await this.db.query(
          'INSERT INTO fence (key, high_water) VALUES ($1, 0) ON CONFLICT (key) DO NOTHING', [event]);
        const r = await this.db.query(
          'UPDATE fence SET high_water = $1 WHERE key = $2 AND high_water < $1', [tok, event]);
        if (r.rowCount === 0) {
          await this.db.query('ROLLBACK');
          return false;
        }
      }
      await this.db.query('INSERT INTO sales (event, seat, token, seller) VALUES ($1, $2, $3, $4)',
        [event, seat, tok, seller]);
      await this.db.query('UPDATE stock SET remaining = $1 WHERE event = $2', [remaining - 1, event]);
      await this.db.query('COMMIT');
      return true;
    } catch (e) {
      await this.db.query('ROLLBACK').catch(() => {});
      throw e;
    }
  }

  async close() {
    await this.db.end();
  }
}

class Stale extends Error {}

function openStore(url) {
  if (url.startsWith('postgres://') || url.startsWith('postgresql://')) return new PostgresStore(url);
  return new SqliteStore(url.replace(/^sqlite:\/\//, '').replace(/^sqlite:/, ''));
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// One line from stdin (the demo's "start", and its "go" after the chaos pause).
function readLine() {
  return new Promise((resolve) => {
    const rl = readline.createInterface({ input: process.stdin });
    rl.once('line', () => { rl.close(); resolve(); });
    rl.once('close', resolve);
  });
}

async function main() {
  const { values: o } = parseArgs({
    options: {
      addrs: { type: 'string' }, db: { type: 'string' }, event: { type: 'string' }, name: { type: 'string' },
      lease: { type: 'string', default: '5' }, wait: { type: 'string', default: '10' },
      'work-ms': { type: 'string', default: '10' }, deadline: { type: 'string', default: '300' },
      'pause-after-sales': { type: 'string' }, 'wait-start': { type: 'boolean', default: false },
      'no-fence': { type: 'boolean', default: false },
    },
  });
  for (const k of ['addrs', 'db', 'event', 'name']) {
    if (!o[k]) throw new Error(`seller.js: --${k} is required`);
  }
  const [lease, wait, workMs, deadlineS] = [o.lease, o.wait, o['work-ms'], o.deadline].map(Number);
  const pauseAfter = o['pause-after-sales'] === undefined ? null : Number(o['pause-after-sales']);
  const name = o.name;
  const log = (msg) => process.stderr.write(`${name}: ${msg}\n`);
  const counts = {
    sold: 0, fence_refusals: 0, timeouts: 0, busy: 0, indeterminate: 0, unavailable: 0,
    insufficient_time: 0, release_failures: 0, db_errors: 0,
  };
  const result = () => `RESULT name=${name}` + Object.entries(counts).map(([k, v]) => ` ${k}=${v}`).join('');
  const store = openStore(o.db);
  const broker = new TicketBroker(o.addrs.split(','));
  let backoff = 50;
  const retryLater = async (what) => {
    counts[what] += 1;
    await sleep(backoff * (0.5 + Math.random()));
    backoff = Math.min(backoff * 2, 1000);
  };
  let paused = false;
  const end = Date.now() + deadlineS * 1000;
  if (!(await broker.waitReady(10))) log('no leader within 10 s; trying anyway');
  if (o['wait-start']) {
    process.stdout.write('READY\n');
    await readLine();
  }

  for (;;) {
    if (Date.now() > end) {
      log(`deadline of ${deadlineS} s passed`);
      console.log(result());
      return 3;
    }
    let ticket;
    try {
      ticket = await broker.acquire(o.event, wait, lease, 1);
    } catch (e) {
      const code = e instanceof TicketingError ? String(e.code).toUpperCase() : '';
      // INDETERMINATE: maybe granted, maybe not: never enter. A grant returns at lease end.
      const what = { BUSY: 'busy', INDETERMINATE: 'indeterminate', UNAVAILABLE: 'unavailable',
        INSUFFICIENT_TIME: 'insufficient_time' }[code];
      if (!what) throw e;
      await retryLater(what);
      continue;
    }
    if (ticket === null) {
      counts.timeouts += 1;
      continue;
    }
    backoff = 50;
    let done = false;
    try {
      const [remaining, seats] = await store.readStock(o.event);
      if (remaining <= 0) {
        done = true;
      } else {
        const seat = seats - remaining + 1;
        if (pauseAfter !== null && !paused && counts.sold >= pauseAfter) {
          paused = true;
          process.stdout.write(`HOLDING token=${ticket.token} seat=${seat}\n`);
          await readLine();
        }
        await sleep(workMs); // e.g. the payment provider's answer
        if (await store.sell(o.event, ticket.token, seat, remaining, name, !o['no-fence'])) {
          counts.sold += 1;
        } else {
          counts.fence_refusals += 1;
          log(`fence refused token ${ticket.token} (seat ${seat}): a newer holder wrote first`);
        }
      }
    } catch (e) {
      if (e instanceof TicketingError) throw e;
      counts.db_errors += 1;
      log(`database error, rolled back: ${e.message}`);
    } finally {
      try {
        await ticket.release();
      } catch (e) {
        counts.release_failures += 1;
        log(`release: ${e.message}`);
      }
    }
    if (done) break;
  }
  await broker.close();
  await store.close();
  console.log(result());
  return 0;
}

// process.exit: the broker's connections must not keep a finished seller alive
// (stdout to a pipe is synchronous on Linux, so the RESULT line is out).
main().then(
  (code) => process.exit(code),
  (e) => { process.stderr.write(`seller: ${e.stack || e}\n`); process.exit(1); },
);
