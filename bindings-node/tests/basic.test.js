// The seed-style flow against a real standalone server: connect, acquire,
// release, null on T, BUSY, withLock, close.
'use strict'
const test = require('node:test')
const assert = require('node:assert/strict')
const ticketing = require('ticketing')
const { TicketBroker, Ticket, TicketingError, BusyError, ClosedError, LockTimeoutError } = ticketing
const { InsufficientTimeError, UnavailableError, AuthFailedError } = ticketing
const { Server, key, deadAddr } = require('./helpers.js')

let srv
let broker
test.before(async () => {
  srv = await Server.start()
  broker = await TicketBroker.connect(srv.addr)
})
test.after(async () => {
  await broker?.close()
  await srv?.stop()
})

test('connect, waitReady, acquire, release: a bigint token, the key, the remaining time', async () => {
  assert.equal(await broker.waitReady(5), true)
  const k = key()
  const t = await broker.acquire(k, 5, 30, 2)
  assert.ok(t instanceof Ticket)
  assert.equal(typeof t.token, 'bigint')
  assert.ok(t.token >= 1n && t.token < 2n ** 63n)
  assert.equal(t.key, k)
  const left = t.remaining()
  assert.ok(left > 2 && left <= 30, `remaining ${left}`)
  assert.equal(t.expired, false)
  assert.equal((await srv.lock(k)).holder.token, Number(t.token))
  assert.equal(await t.release(), true)
  assert.equal(await t.release(), true, 'a second release returns the first definite result')
  assert.equal((await srv.lock(k)).holder, null)
  const again = await broker.acquire(k, 0, 10)
  assert.ok(again.token > t.token, 'tokens strictly increase')
  assert.equal(await again.release(), true)
})

test('null when not granted within wait (T), for wait 0 and wait 1', async () => {
  const k = key()
  const t = await broker.acquire(k, 0, 30)
  assert.equal(await broker.acquire(k, 0, 30), null)
  const t0 = Date.now()
  assert.equal(await broker.acquire(k, 1, 30), null)
  assert.ok(Date.now() - t0 >= 900, 'waited about 1 s in the queue')
  assert.equal(await t.release(), true)
})

test('fractions round up: wait 0.2 waits, lease 0.5 is a 1 s lease', async () => {
  const k = key()
  const t = await broker.acquire(k, 0.2, 0.5)
  assert.ok(t.remaining() > 0.5 && t.remaining() <= 1, `remaining ${t.remaining()}`)
  assert.equal(await t.release(), true)
})

test('a released ticket is not the holder any more: release of an expired grant is false', async () => {
  const k = key()
  const t = await broker.acquire(k, 0, 1)
  const other = await broker.acquire(k, 5, 30) // granted at lease end
  assert.ok(other)
  assert.equal(await t.release(), false)
  assert.equal(await other.release(), true)
})

test('withLock resolves to the callback value and releases', async () => {
  const k = key()
  const seen = []
  const v = await broker.withLock(k, { wait: 5, lease: 30, budget: 1 }, async (t) => {
    seen.push(t)
    assert.equal((await srv.lock(k)).holder.token, Number(t.token))
    return 42
  })
  assert.equal(v, 42)
  assert.equal((await srv.lock(k)).holder, null, 'released after the callback')
  const sync = await broker.withLock(k, { wait: 1, lease: 5 }, (t) => t.key)
  assert.equal(sync, k)
})

test('withLock releases when the callback throws, and the callback error wins', async () => {
  const k = key()
  const boom = new Error('boom')
  await assert.rejects(broker.withLock(k, { wait: 5, lease: 30 }, async () => { throw boom }), (e) => e === boom)
  assert.equal((await srv.lock(k)).holder, null)
})

test('withLock rejects with LOCK_TIMEOUT when not granted within wait', async () => {
  const k = key()
  const t = await broker.acquire(k, 0, 30)
  let called = false
  await assert.rejects(broker.withLock(k, { wait: 0, lease: 5 }, () => { called = true }), (e) => {
    assert.ok(e instanceof LockTimeoutError)
    assert.ok(e instanceof TicketingError)
    assert.equal(e.code, 'LOCK_TIMEOUT')
    assert.equal(e.name, 'LockTimeoutError')
    return true
  })
  assert.equal(called, false)
  assert.equal(await t.release(), true)
})

test('Symbol.asyncDispose (await using) releases a ticket and closes a broker', async () => {
  // Node 20 has no `await using` syntax; TypeScript compiles it to these calls.
  const k = key()
  const b = await TicketBroker.connect(srv.addr)
  const t = await b.acquire(k, 5, 30)
  assert.ok((await srv.lock(k)).holder)
  await t[Symbol.asyncDispose]()
  assert.equal((await srv.lock(k)).holder, null, 'released by Symbol.asyncDispose')
  await b[Symbol.asyncDispose]()
  await assert.rejects(b.acquire(k, 0, 5), ClosedError)
})

test('BUSY when the key queue is full (--max-waiters-per-key 1)', async () => {
  const small = await Server.start(['--max-waiters-per-key', '1'])
  const b = await TicketBroker.connect(small.addr)
  try {
    const k = key()
    const holder = await b.acquire(k, 0, 30)
    const queued = b.acquire(k, 20, 30)
    await small.waiters(k, 1)
    await assert.rejects(b.acquire(k, 20, 30), (e) => {
      assert.ok(e instanceof BusyError)
      assert.ok(e instanceof TicketingError)
      assert.ok(e instanceof Error)
      assert.equal(e.code, 'BUSY')
      assert.match(e.message, /busy/)
      return true
    })
    assert.equal(await holder.release(), true)
    const next = await queued
    assert.ok(next.token > holder.token)
    assert.equal(await next.release(), true)
  } finally {
    await b.close()
    await small.stop()
  }
})

test('close: pending acquires and later calls reject with CLOSED; close is idempotent', async () => {
  const k = key()
  const b = await TicketBroker.connect(srv.addr)
  const holder = await broker.acquire(k, 0, 30)
  const pending = b.acquire(k, 30, 30).then((t) => t, (e) => e)
  await srv.waiters(k, 1)
  await b.close()
  const e = await pending
  assert.ok(e instanceof ClosedError && e.code === 'CLOSED', String(e))
  assert.equal(e.cause.code, 'CLOSED', 'the native error carries the code as a property')
  assert.equal(e.message, 'closed: the broker is closed')
  await assert.rejects(b.acquire(k, 0, 5), ClosedError)
  assert.equal(await b.waitReady(1), false)
  await b.close()
  assert.equal(await holder.release(), true)
})

test('the constructor form with options connects in the background', async () => {
  const b = new TicketBroker([srv.addr], { token: null, tls: 'off' })
  try {
    assert.equal(await b.waitReady(10), true)
    const t = await b.acquire(key(), 0, 5)
    assert.ok(t)
    assert.equal(await t.release(), true)
  } finally {
    await b.close()
  }
})

test('Ticket cannot be constructed by hand', () => {
  assert.throws(() => new Ticket({}), TypeError)
})

test('INSUFFICIENT_TIME when the grant leaves less than the budget; the client hands the grant back', async () => {
  const k = key()
  // lease 1 s: the conservative deadline is under 0.999 s away, below a 1 s budget.
  await assert.rejects(broker.acquire(k, 0, 1, 1), (e) => e instanceof InsufficientTimeError && e.code === 'INSUFFICIENT_TIME')
  const t = await broker.acquire(k, 5, 30)
  assert.ok(t, 'the handed-back grant was released')
  assert.equal(await t.release(), true)
})

test('UNAVAILABLE when no connection is ready within wait (nothing listens)', async () => {
  const b = new TicketBroker([await deadAddr()])
  try {
    await assert.rejects(b.acquire(key(), 1, 5), (e) => e instanceof UnavailableError && e.code === 'UNAVAILABLE')
    assert.equal(await b.waitReady(0.2), false)
  } finally {
    await b.close()
  }
})

test('AUTH_FAILED with a wrong token; the right token works', async () => {
  const secured = await Server.start([], { TICKETING_CLIENT_TOKENS: 'node-secret,rotated-secret' })
  const good = new TicketBroker([secured.addr], { token: 'rotated-secret' })
  const bad = new TicketBroker([secured.addr], { token: 'wrong' })
  try {
    assert.equal(await good.waitReady(10), true)
    const t = await good.acquire(key(), 0, 5)
    assert.ok(t)
    assert.equal(await t.release(), true)
    await assert.rejects(bad.acquire(key(), 2, 5), (e) => e instanceof AuthFailedError && e.code === 'AUTH_FAILED')
  } finally {
    await good.close()
    await bad.close()
    await secured.stop()
  }
})
