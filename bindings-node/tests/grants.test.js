// Counted and multi-key grants against a real standalone server
// (docs/node.md, "Shared, counted and multi-key locks"): acquireShared
// (semaphore slots), read/write locks, acquireAll (one token for every key),
// the with* forms, AbortSignal, await using.
'use strict'
const test = require('node:test')
const assert = require('node:assert/strict')
const { TicketBroker, Ticket, TicketingError, LockTimeoutError } = require('ticketing')
const { Server, key } = require('./helpers.js')

let srv
let broker
let other
test.before(async () => {
  srv = await Server.start()
  broker = await TicketBroker.connect(srv.addr)
  other = await TicketBroker.connect(srv.addr)
})
test.after(async () => {
  await other?.close()
  await broker?.close()
  await srv?.stop()
})

// The tokens of the key's current holders (admin /locks/<key>).
async function holders(k) {
  return (await srv.lock(k)).holders.map((h) => h.token)
}

// A promise with its resolve function, to hold a with* callback open.
function gate() {
  let open
  const p = new Promise((resolve) => (open = resolve))
  return { p, open }
}

test('a semaphore of 2: two holders with slots 0 and 1, a third times out or waits and reuses the released slot', async () => {
  const k = key('sem')
  const a = await broker.acquireShared(k, 2, 0, 30)
  const b = await other.acquireShared(k, 2, 0, 30, 1) // with a budget
  assert.ok(a instanceof Ticket && b instanceof Ticket)
  assert.deepEqual([a.slot, b.slot].sort(), [0, 1], 'the two holders have distinct slots 0 and 1')
  assert.equal(typeof a.slot, 'number')
  assert.equal(a.key, k)
  assert.deepEqual(a.keys, [k])
  assert.ok(Object.isFrozen(a.keys))
  assert.equal(typeof a.token, 'bigint')
  assert.notEqual(a.token, b.token, 'each counted grant has its own token')
  assert.deepEqual((await holders(k)).sort(), [Number(a.token), Number(b.token)].sort())

  // The third: wait 0 → null at once (T); with a wait it queues.
  assert.equal(await broker.acquireShared(k, 2, 0, 30), null)
  const third = broker.acquireShared(k, 2, 30, 30, { signal: new AbortController().signal })
  await srv.waiters(k, 1)
  const freed = b.slot
  assert.equal(await b.release(), true)
  const c = await third
  assert.ok(c, 'granted once a permit was released')
  assert.equal(c.slot, freed, 'the released slot is reused (the lowest free one)')
  assert.ok(c.token > a.token && c.token > b.token, 'tokens strictly increase')
  assert.deepEqual((await holders(k)).sort(), [Number(a.token), Number(c.token)].sort())

  // An exclusive acquire of the key waits for every counted holder.
  assert.equal(await broker.acquire(k, 0, 30), null)
  assert.equal(await a.release(), true)
  assert.equal(await c.release(), true)
  assert.equal(await a.release(), true, 'a second release returns the first definite result')
  const x = await broker.acquire(k, 0, 30)
  assert.ok(x && x.slot === null, 'free again: an exclusive grant, slot null')
  assert.equal(await x.release(), true)
})

test('read locks are shared; a write lock waits for the readers, a later reader waits for the writer', async () => {
  const k = key('rw')
  const order = []
  const r1Held = gate()
  const r2Held = gate()
  const r1Done = gate()
  const r2Done = gate()
  const r1 = broker.withReadLock(k, { wait: 5, lease: 30 }, async (t) => {
    r1Held.open(t)
    await r1Done.p
    order.push('r1')
  })
  const r2 = other.withReadLock(k, { wait: 5, lease: 30 }, async (t) => {
    r2Held.open(t)
    await r2Done.p
    order.push('r2')
  })
  const [t1, t2] = await Promise.all([r1Held.p, r2Held.p])
  assert.equal(typeof t1.slot, 'number')
  assert.notEqual(t1.slot, t2.slot, 'two readers hold distinct slots')
  assert.equal((await holders(k)).length, 2, 'both readers hold the key at once')

  const w = broker.withWriteLock(k, { wait: 30, lease: 30 }, async (t) => {
    assert.equal(t.slot, null, 'the write side is exclusive')
    assert.deepEqual(await holders(k), [Number(t.token)], 'the writer holds alone')
    order.push('w')
    return t.token
  })
  await srv.waiters(k, 1)
  // A reader arriving behind the waiting writer does not overtake it.
  const r3 = other.withReadLock(k, { wait: 30, lease: 30 }, async (t) => {
    order.push('r3')
    return t.token
  })
  await srv.waiters(k, 2)
  const kinds = (await srv.lock(k)).waiters.map((x) => x.kind)
  assert.deepEqual(kinds, ['exclusive', 'shared'])

  r1Done.open()
  await r1
  assert.equal((await holders(k)).length, 1, 'the writer still waits for the second reader')
  assert.equal((await srv.lock(k)).waiters.length, 2)
  r2Done.open()
  await r2
  const wToken = await w
  const r3Token = await r3
  assert.deepEqual(order, ['r1', 'r2', 'w', 'r3'])
  assert.ok(r3Token > wToken && wToken > t2.token && wToken > t1.token)
  assert.deepEqual(await holders(k), [], 'every with* form released')
})

test('acquireAll of 2 keys: one token for both, keys listed, release frees both, an overlapping acquireAll waits', async () => {
  const [a, b, c] = [key('all-a'), key('all-b'), key('all-c')]
  const t = await broker.acquireAll([a, b], 0, 30)
  assert.ok(t instanceof Ticket)
  assert.deepEqual(t.keys, [a, b])
  assert.ok(Object.isFrozen(t.keys))
  assert.equal(t.key, a, 'key is the first key')
  assert.equal(t.slot, null)
  assert.deepEqual(await holders(a), [Number(t.token)], 'one token ...')
  assert.deepEqual(await holders(b), [Number(t.token)], '... for both keys')
  assert.equal(await other.acquire(a, 0, 30), null)
  assert.equal(await other.acquire(b, 0, 30), null)

  const overlapping = other.acquireAll([c, b], 30, 30) // another order: no deadlock
  await srv.waiters(b, 1)
  assert.equal((await srv.lock(b)).waiters[0].kind, 'all')
  assert.deepEqual(await holders(c), [], 'c is not granted while b is held')

  assert.equal(await t.release(), true, 'released every key')
  const u = await overlapping
  assert.ok(u && u.token > t.token)
  assert.deepEqual(u.keys, [c, b])
  assert.deepEqual(await holders(a), [], 'a is free')
  assert.deepEqual(await holders(b), [Number(u.token)])
  assert.deepEqual(await holders(c), [Number(u.token)])
  assert.equal(await u.release(), true)
  assert.deepEqual(await holders(b), [])
  assert.deepEqual(await holders(c), [])

  // await using works for these tickets as for any Ticket.
  const d = await broker.acquireAll([a, b, c], 5, 30, { signal: AbortSignal.timeout(30000) })
  await d[Symbol.asyncDispose]()
  for (const k of [a, b, c]) assert.deepEqual(await holders(k), [], `${k} released by asyncDispose`)
})

// The with* forms: each resolves to the callback's value and releases, releases
// when the callback throws (its error wins), and rejects with LockTimeoutError
// on T without calling the callback.
// The last column: whether the form's ticket is a counted grant (a slot).
const scopedForms = [
  ['withSharedLock', (b, k, opts, fn) => b.withSharedLock(k, 3, opts, fn), (k) => [k], true],
  ['withAllLocks', (b, k, opts, fn) => b.withAllLocks([k, `${k}-2`], opts, fn), (k) => [k, `${k}-2`], false],
  ['withReadLock', (b, k, opts, fn) => b.withReadLock(k, opts, fn), (k) => [k], true],
  ['withWriteLock', (b, k, opts, fn) => b.withWriteLock(k, opts, fn), (k) => [k], false],
]
for (const [name, run, keysOf, counted] of scopedForms) {
  test(`${name}: releases on exit and on throw, LockTimeoutError on T`, async () => {
    const k = key(name)
    const ks = keysOf(k)
    const v = await run(broker, k, { wait: 5, lease: 30, budget: 1 }, async (t) => {
      assert.ok(t instanceof Ticket)
      assert.deepEqual(t.keys, ks)
      assert.equal(t.slot, counted ? 0 : null, 'slot 0 for a counted grant of a free key, null for an exclusive one')
      for (const x of ks) assert.deepEqual(await holders(x), [Number(t.token)])
      return 42
    })
    assert.equal(v, 42)
    for (const x of ks) assert.deepEqual(await holders(x), [], `${x} released after the callback`)

    const boom = new Error('boom')
    await assert.rejects(run(broker, k, { wait: 5, lease: 30 }, () => { throw boom }), (e) => e === boom)
    for (const x of ks) assert.deepEqual(await holders(x), [], `${x} released after the throw`)

    // Held exclusively elsewhere: T after wait 0.
    const blocker = await other.acquire(k, 0, 30)
    let called = false
    await assert.rejects(run(broker, k, { wait: 0, lease: 5 }, () => { called = true }), (e) => {
      assert.ok(e instanceof LockTimeoutError, String(e))
      assert.ok(e instanceof TicketingError)
      assert.equal(e.code, 'LOCK_TIMEOUT')
      assert.match(e.message, /not granted within wait=0 s/)
      return true
    })
    assert.equal(called, false)
    assert.equal(await blocker.release(), true)
  })
}

test('AbortSignal cancels a waiting acquireShared: rejects with the reason, the waiter leaves the queue', async () => {
  const k = key('abort')
  const holder = await broker.acquire(k, 0, 30)
  const controller = new AbortController()
  const waiting = broker.acquireShared(k, 2, 60, 30, 0, { signal: controller.signal }).then((t) => t, (e) => e)
  await srv.waiters(k, 1)
  const reason = new Error('user went away')
  controller.abort(reason)
  assert.equal(await waiting, reason)
  await srv.waiters(k, 0)
  assert.equal(await holder.release(), true)
  assert.deepEqual(await holders(k), [], 'nobody got the key after the abort')

  // An already-aborted signal rejects at once and sends nothing.
  const early = new Error('early')
  await assert.rejects(broker.acquireAll([k, `${k}-x`], 5, 30, { signal: AbortSignal.abort(early) }), (e) => e === early)
  await assert.rejects(broker.withReadLock(k, { wait: 5, lease: 30, signal: AbortSignal.abort(early) }, () => 1), (e) => e === early)
  assert.equal((await srv.lock(k)).waiters.length, 0)

  // The broker that aborted keeps working.
  const again = await broker.acquireShared(k, 2, 5, 30)
  assert.ok(again)
  assert.equal(await again.release(), true)
})

test('an exclusive ticket has slot null and one key', async () => {
  const k = key()
  const t = await broker.acquire(k, 0, 30)
  assert.equal(t.slot, null)
  assert.deepEqual(t.keys, [k])
  assert.equal(await t.release(), true)
})
