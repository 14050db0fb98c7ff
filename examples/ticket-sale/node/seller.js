'use strict';
// A ticket seller in Node: sells seats of one event until none is left.
//
// Each sale: take the lock on the event key, read the stock, then in ONE
// database transaction guarded by the fence (docs/fencing.md) record the seat
// and decrement the stock; commit; release. With --basket K: K unsold seats
// at once under the locks of every seat (acquireAll), fenced per seat. With
// --general N: a permit of a semaphore of N on the event key (acquireShared)
// and a seat of the box-office window of its slot, fenced per (key, slot).
// Run by examples/ticket-sale/demo; the arguments are described in
// examples/README.md.
// SQLite: better-sqlite3@12 (13 crashes on Node 20); PostgreSQL: pg.

const readline = require('node:readline');
const { parseArgs } = require('node:util');
const { TicketBroker, TicketingError } = require('ticketing');

// Basket mode: the lock key (and fence key) of one seat.
const seatKey = (event, seat) => `${event}/${seat}`;
// General admission: the fence key of one slot of the event's semaphore.
const slotFenceKey = (event, slot) => `${event}#${slot}`;
// Seat numbers as an SQL list (integers only: nothing to quote).
const sqlList = (seats) => seats.map((x) => String(Math.trunc(Number(x)))).join(',');

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
    // fenceOk: the fence of `key` in the open transaction; false if the token is stale.
    const fenceOk = (key, token) => {
      this.fenceInsert.run(key);
      return this.fenceUpdate.run(token, key, token).changes === 1;
    };
    this.stockTake = this.db.prepare('UPDATE stock SET remaining = remaining - ? WHERE event = ?');
    this.windowRead = this.db.prepare('SELECT remaining, seats FROM windows WHERE event = ? AND slot = ?');
    this.windowUpdate = this.db.prepare('UPDATE windows SET remaining = ? WHERE event = ? AND slot = ?');
    this.basketTx = this.db.transaction((event, token, seats, seller, fence) => {
      if (fence) {
        for (const seat of seats) if (!fenceOk(seatKey(event, seat), token)) throw new Stale();
      }
      for (const seat of seats) this.saleInsert.run(event, seat, token, seller);
      this.stockTake.run(seats.length, event);
    });
    this.generalTx = this.db.transaction((event, slot, token, seat, windowRemaining, seller, fence) => {
      if (fence && !fenceOk(slotFenceKey(event, slot), token)) throw new Stale();
      this.saleInsert.run(event, seat, token, seller);
      this.windowUpdate.run(windowRemaining - 1, event, slot);
      this.stockTake.run(1, event);
    });
  }

  async unsoldSeats(event) {
    const [, seats] = await this.readStock(event);
    const sold = new Set(this.db.prepare('SELECT DISTINCT seat FROM sales WHERE event = ?').all(event)
      .map((r) => Number(r.seat)));
    const out = [];
    for (let s = 1; s <= seats; s++) if (!sold.has(s)) out.push(s);
    return out;
  }

  async soldAmong(event, seats) {
    return Number(this.db.prepare(`SELECT count(*) AS n FROM sales WHERE event = ? AND seat IN (${sqlList(seats)})`)
      .get(event).n);
  }

  async readWindow(event, slot) {
    const row = this.windowRead.get(event, slot);
    if (!row) throw new Error(`no window ${slot} for ${event}`);
    return [Number(row.remaining), Number(row.seats)];
  }

  // Every seat of the basket sold, each fenced, in ONE transaction; the
  // stock decremented in the database (other baskets sell at the same time).
  async sellBasket(event, token, seats, seller, fence) {
    return this.#run(() => this.basketTx.immediate(event, token, [...seats].sort((a, b) => a - b), seller, fence));
  }

  // A seat of window `slot`: fenced per (key, slot), the window's count
  // written from what was read under the permit, the stock decremented.
  async sellGeneral(event, slot, token, seat, windowRemaining, seller, fence) {
    return this.#run(() => this.generalTx.immediate(event, slot, token, seat, windowRemaining, seller, fence));
  }

  #run(tx) {
    try {
      tx();
      return true;
    } catch (e) {
      if (e instanceof Stale) return false;
      throw e;
    }
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

  async unsoldSeats(event) {
    const [, seats] = await this.readStock(event);
    const r = await this.db.query('SELECT DISTINCT seat FROM sales WHERE event = $1', [event]);
    const sold = new Set(r.rows.map((row) => Number(row.seat)));
    const out = [];
    for (let s = 1; s <= seats; s++) if (!sold.has(s)) out.push(s);
    return out;
  }

  async soldAmong(event, seats) {
    await this.connected;
    const r = await this.db.query(`SELECT count(*) AS n FROM sales WHERE event = $1 AND seat IN (${sqlList(seats)})`,
      [event]);
    return Number(r.rows[0].n);
  }

  async readWindow(event, slot) {
    await this.connected;
    const r = await this.db.query('SELECT remaining, seats FROM windows WHERE event = $1 AND slot = $2', [event, slot]);
    if (r.rowCount === 0) throw new Error(`no window ${slot} for ${event}`);
    return [Number(r.rows[0].remaining), Number(r.rows[0].seats)];
  }

  // One transaction: `fenceKeys` fenced with `token` (false if any is stale:
  // rolled back), then `writes` ([sql, params] pairs).
  async #fenced(token, fenceKeys, writes) {
    await this.connected;
    await this.db.query('BEGIN');
    try {
      for (const key of fenceKeys) {
        await this.db.query('INSERT INTO fence (key, high_water) VALUES ($1, 0) ON CONFLICT (key) DO NOTHING', [key]);
        const r = await this.db.query('UPDATE fence SET high_water = $1 WHERE key = $2 AND high_water < $1',
          [token.toString(), key]);
        if (r.rowCount === 0) {
          await this.db.query('ROLLBACK');
          return false;
        }
      }
      for (const [sql, params] of writes) await this.db.query(sql, params);
      await this.db.query('COMMIT');
      return true;
    } catch (e) {
      await this.db.query('ROLLBACK').catch(() => {});
      throw e;
    }
  }

  async sellBasket(event, token, seats, seller, fence) {
    const sorted = [...seats].sort((a, b) => a - b); // one order for every writer
    const sale = 'INSERT INTO sales (event, seat, token, seller) VALUES ($1, $2, $3, $4)';
    return this.#fenced(token, fence ? sorted.map((s) => seatKey(event, s)) : [], [
      ...sorted.map((s) => [sale, [event, s, token.toString(), seller]]),
      ['UPDATE stock SET remaining = remaining - $1 WHERE event = $2', [sorted.length, event]],
    ]);
  }

  async sellGeneral(event, slot, token, seat, windowRemaining, seller, fence) {
    return this.#fenced(token, fence ? [slotFenceKey(event, slot)] : [], [
      ['INSERT INTO sales (event, seat, token, seller) VALUES ($1, $2, $3, $4)', [event, seat, token.toString(), seller]],
      ['UPDATE windows SET remaining = $1 WHERE event = $2 AND slot = $3', [windowRemaining - 1, event, slot]],
      ['UPDATE stock SET remaining = remaining - 1 WHERE event = $1', [event]],
    ]);
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
      basket: { type: 'string' }, general: { type: 'string' },
    },
  });
  for (const k of ['addrs', 'db', 'event', 'name']) {
    if (!o[k]) throw new Error(`seller.js: --${k} is required`);
  }
  const [lease, wait, workMs, deadlineS] = [o.lease, o.wait, o['work-ms'], o.deadline].map(Number);
  const pauseAfter = o['pause-after-sales'] === undefined ? null : Number(o['pause-after-sales']);
  const basket = o.basket === undefined ? null : Number(o.basket);
  const general = o.general === undefined ? null : Number(o.general);
  if (basket !== null && general !== null) throw new Error('seller.js: --basket and --general exclude each other');
  if (basket !== null && !(Number.isInteger(basket) && basket >= 2 && basket <= 16)) {
    throw new Error('seller.js: --basket must be 2..16');
  }
  if (general !== null && !(Number.isInteger(general) && general >= 1 && general <= 1000)) {
    throw new Error('seller.js: --general must be 1..1000');
  }
  const name = o.name;
  const log = (msg) => process.stderr.write(`${name}: ${msg}\n`);
  const counts = {
    sold: 0, fence_refusals: 0, timeouts: 0, busy: 0, indeterminate: 0, unavailable: 0,
    insufficient_time: 0, release_failures: 0, db_errors: 0, basket_conflicts: 0,
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
  // Every outcome of an acquire the library defines: the ticket, or null to try again.
  const acquireOr = async (acquire) => {
    let ticket;
    try {
      ticket = await acquire();
    } catch (e) {
      const code = e instanceof TicketingError ? String(e.code).toUpperCase() : '';
      // INDETERMINATE: maybe granted, maybe not: never enter. The client releases such a grant within 5 s.
      const what = { BUSY: 'busy', INDETERMINATE: 'indeterminate', UNAVAILABLE: 'unavailable',
        INSUFFICIENT_TIME: 'insufficient_time' }[code];
      if (!what) throw e;
      await retryLater(what);
      return null;
    }
    if (ticket === null) counts.timeouts += 1;
    else backoff = 50;
    return ticket;
  };
  const release = async (ticket) => {
    try {
      await ticket.release();
    } catch (e) {
      counts.release_failures += 1;
      log(`release: ${e.message}`);
    }
  };
  const maybePause = async (what) => {
    if (pauseAfter !== null && !paused && counts.sold >= pauseAfter) {
      paused = true;
      process.stdout.write(`HOLDING ${what}\n`);
      await readLine();
    }
  };
  // General admission: permits of sold-out windows, kept while asking for another.
  const empty = [];
  const releaseEmpty = async () => {
    while (empty.length > 0) await release(empty.pop());
  };

  while (basket !== null || general !== null) {
    if (Date.now() > end) {
      log(`deadline of ${deadlineS} s passed`);
      console.log(result());
      return 3;
    }
    let ticket;
    try {
      if (basket !== null) {
        const unsold = await store.unsoldSeats(o.event);
        if (unsold.length === 0) break;
        // K of the unsold seats, drawn at random, in random order.
        const k = Math.min(basket, unsold.length);
        for (let i = 0; i < k; i++) {
          const j = i + Math.floor(Math.random() * (unsold.length - i));
          [unsold[i], unsold[j]] = [unsold[j], unsold[i]];
        }
        const seats = unsold.slice(0, k);
        const keys = seats.map((s) => seatKey(o.event, s));
        ticket = await acquireOr(() => (keys.length === 1
          ? broker.acquire(keys[0], wait, lease, 1) : broker.acquireAll(keys, wait, lease, 1)));
        if (ticket === null) continue;
        if (await store.soldAmong(o.event, seats) > 0) {
          counts.basket_conflicts += 1; // another basket took one of them before our grant
        } else {
          await maybePause(`token=${ticket.token} seats=${seats.join(',')}`);
          await sleep(workMs);
          if (await store.sellBasket(o.event, ticket.token, seats, name, !o['no-fence'])) {
            counts.sold += seats.length;
          } else {
            counts.fence_refusals += 1;
            log(`fence refused token ${ticket.token} (seats ${seats.join(',')}): a newer holder wrote first`);
          }
        }
      } else {
        // The event's stock is exact (decremented in the database): it says when the sale is over.
        const [left] = await store.readStock(o.event);
        if (left <= 0) break;
        ticket = await acquireOr(() => broker.acquireShared(o.event, general, wait, lease, 1));
        if (ticket === null) {
          await releaseEmpty();
          continue;
        }
        const slot = ticket.slot;
        const [remaining, seats] = await store.readWindow(o.event, slot);
        if (remaining <= 0) {
          empty.push(ticket); // sold-out window: keep the permit, ask for another
          ticket = undefined;
          continue;
        }
        // Window `slot` sells the seats slot+1, slot+1+N, slot+1+2N, ...
        const seat = slot + 1 + general * (seats - remaining);
        await maybePause(`token=${ticket.token} seat=${seat} slot=${slot}`);
        await sleep(workMs);
        if (await store.sellGeneral(o.event, slot, ticket.token, seat, remaining, name, !o['no-fence'])) {
          counts.sold += 1;
        } else {
          counts.fence_refusals += 1;
          log(`fence refused token ${ticket.token} (slot ${slot}, seat ${seat}): a newer holder of the slot wrote first`);
        }
      }
    } catch (e) {
      if (e instanceof TicketingError) throw e;
      counts.db_errors += 1;
      log(`database error, rolled back: ${e.message}`);
    } finally {
      if (ticket) await release(ticket);
      if (ticket) await releaseEmpty();
    }
  }
  if (basket !== null || general !== null) {
    await releaseEmpty();
    await broker.close();
    await store.close();
    console.log(result());
    return 0;
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
      // INDETERMINATE: maybe granted, maybe not: never enter. The client releases such a grant within 5 s.
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
