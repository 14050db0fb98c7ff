// AbortSignal: an already-aborted signal rejects at once with its reason
// and sends nothing; an abort while waiting in the queue rejects with the
// reason, the server drops the waiter, and the key goes to the next one.
'use strict'
const test = require('node:test')
const assert = require('node:assert/strict')
const { setMaxListeners } = require('node:events')
const { TicketBroker } = require('ticketing')
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

test('an already-aborted signal rejects at once with signal.reason; nothing is sent', async () => {
  const reason = new Error('stop')
  const k = key()
  await assert.rejects(broker.acquire(k, 5, 30, 0, { signal: AbortSignal.abort(reason) }), (e) => e === reason)
  const lock = await srv.lock(k)
  assert.equal(lock.holder, null)
  assert.equal(lock.waiters.length, 0)
  // Also with no server at all: the abort wins over the wait for a connection.
  const dead = new TicketBroker([await deadAddr()])
  try {
    const t0 = Date.now()
    await assert.rejects(dead.acquire('k', 30, 30, 0, { signal: AbortSignal.abort() }), (e) => e.name === 'AbortError')
    assert.ok(Date.now() - t0 < 25000, 'rejected at once, not after the 30 s wait')
  } finally {
    await dead.close()
  }
})

test('an already-aborted signal also stops withLock before the callback', async () => {
  const reason = new Error('no')
  let called = false
  await assert.rejects(broker.withLock(key(), { wait: 5, lease: 30, signal: AbortSignal.abort(reason) }, () => { called = true }), (e) => e === reason)
  assert.equal(called, false)
})

test('abort while waiting: rejects with the reason, the key goes to the next waiter', async () => {
  const k = key()
  const holder = await broker.acquire(k, 0, 30)
  const controller = new AbortController()
  const aborted = broker.acquire(k, 60, 30, 0, { signal: controller.signal }).then((t) => t, (e) => e)
  await srv.waiters(k, 1)
  const other = await TicketBroker.connect(srv.addr)
  try {
    const next = other.acquire(k, 60, 30)
    await srv.waiters(k, 2)
    const reason = new Error('user went away')
    controller.abort(reason)
    assert.equal(await aborted, reason)
    await srv.waiters(k, 1) // the aborted waiter left the queue
    assert.equal(await holder.release(), true)
    const t = await next
    assert.ok(t && t.token > holder.token, 'the next waiter got the key')
    assert.equal((await srv.lock(k)).holder.token, Number(t.token))
    assert.equal(await t.release(), true)
    // The broker that aborted keeps working.
    const again = await broker.acquire(k, 5, 30)
    assert.ok(again)
    assert.equal(await again.release(), true)
  } finally {
    await other.close()
  }
})

test('abort without a reason rejects with an AbortError; a signal aborted after the grant changes nothing', async () => {
  const k = key()
  const holder = await broker.acquire(k, 0, 30)
  const controller = new AbortController()
  const p = broker.acquire(k, 60, 30, 0, { signal: controller.signal }).then((t) => t, (e) => e)
  await srv.waiters(k, 1)
  controller.abort()
  const e = await p
  assert.equal(e.name, 'AbortError')
  assert.equal(await holder.release(), true)

  const late = new AbortController()
  const t = await broker.acquire(k, 5, 30, { signal: late.signal }) // the budget may be left out
  late.abort()
  assert.equal((await srv.lock(k)).holder.token, Number(t.token), 'still held after a late abort')
  assert.equal(await t.release(), true)
})

test('many acquires aborted by one signal all reject with the abort and leave no waiters', async () => {
  const k = key()
  const holder = await broker.acquire(k, 0, 30)
  const controller = new AbortController()
  setMaxListeners(30, controller.signal)
  const all = []
  for (let i = 0; i < 20; i++) all.push(broker.acquire(k, 60, 30, 0, { signal: controller.signal }).then((t) => t, (e) => e))
  await srv.waiters(k, 20)
  controller.abort()
  for (const e of await Promise.all(all)) assert.equal(e.name, 'AbortError')
  await srv.waiters(k, 0)
  assert.equal(await holder.release(), true)
})
