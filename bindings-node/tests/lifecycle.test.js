// Process life: ticket.signal aborts at the conservative deadline and its
// timer never keeps the process alive; after close() the process exits with
// nothing pending; a garbage-collected unreleased ticket is released
// best-effort; the package works in worker_threads.
'use strict'
const test = require('node:test')
const assert = require('node:assert/strict')
const { once } = require('node:events')
const { Worker } = require('node:worker_threads')
const { TicketBroker, TicketExpiredError } = require('ticketing')
const { Server, key, runScript, within } = require('./helpers.js')

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

test('ticket.signal aborts at the conservative deadline (lease 1 s)', async () => {
  const t0 = performance.now()
  const t = await broker.acquire(key(), 0, 1)
  const signal = t.signal
  assert.equal(signal, t.signal, 'one signal per ticket')
  assert.equal(signal.aborted, false)
  const timeout = setTimeout(() => {}, 10000)
  try {
    await once(signal, 'abort')
  } finally {
    clearTimeout(timeout)
  }
  const elapsed = performance.now() - t0
  assert.equal(t.remaining(), 0, 'aborted no earlier than the deadline')
  assert.equal(t.expired, true)
  assert.ok(elapsed >= 900, `aborted after ${elapsed} ms`)
  assert.ok(signal.reason instanceof TicketExpiredError)
  assert.equal(signal.reason.code, 'TICKET_EXPIRED')
  assert.equal(await t.release(), false, 'the lease ran out')
})

test('a signal read after the deadline is already aborted', async () => {
  const t = await broker.acquire(key(), 0, 1)
  await new Promise((r) => setTimeout(r, 1200))
  assert.equal(t.signal.aborted, true)
})

const exitScript = `
const { TicketBroker } = require('ticketing')
;(async () => {
  const b = await TicketBroker.connect(process.argv[2])
  const t = await b.acquire(process.argv[3], 5, 250)
  t.signal.addEventListener('abort', () => console.log('aborted?!'))
  const kept = await b.acquire(process.argv[3] + '-2', 5, 250) // never released: close() releases it
  void kept.signal
  if (process.argv[4] === 'release') await t.release()
  await b.close()
  console.log('closed')
})()
`

for (const mode of ['release', 'no-release']) {
  test(`the process exits after close() (${mode}), with a 250 s ticket.signal pending`, async () => {
    const k = key()
    const r = await runScript(exitScript, { args: [srv.addr, k, mode], ms: 30000 })
    assert.equal(r.signal, null, `killed after 30 s: the process did not exit\n${r.stderr}`)
    assert.equal(r.code, 0, r.stderr)
    assert.equal(r.stdout.trim(), 'closed')
    // close() released what was still held.
    const lock = await srv.lock(k)
    assert.equal(lock.holder, null)
    assert.equal((await srv.lock(k + '-2')).holder, null)
  })
}

test('the process exits with nothing pending even without close()', async () => {
  const src = `
const { TicketBroker } = require('ticketing')
;(async () => {
  const b = new TicketBroker([process.argv[2]])
  console.log(await b.waitReady(10))
})()`
  const r = await runScript(src, { args: [srv.addr], ms: 30000 })
  assert.equal(r.signal, null, 'the process did not exit')
  assert.equal(r.code, 0, r.stderr)
  assert.equal(r.stdout.trim(), 'true')
})

test('a garbage-collected unreleased ticket is released best-effort', async () => {
  const src = `
const { TicketBroker } = require('ticketing')
;(async () => {
  const b = await TicketBroker.connect(process.argv[2])
  await (async () => { const t = await b.acquire(process.argv[3], 5, 200); console.log('held', typeof t.token) })()
  for (let i = 0; i < 50; i++) { global.gc(); await new Promise((r) => setTimeout(r, 100)) }
  await b.close()
})()`
  const k = key('gc')
  const child = runScript(src, { args: [srv.addr, k], nodeArgs: ['--expose-gc'], ms: 60000 })
  await within(30000, async () => (await srv.lock(k)).holder !== null, 'the child to hold the key')
  // The holder is released long before its 200 s lease: this acquire gets it.
  const t = await broker.acquire(k, 30, 10)
  assert.ok(t, 'granted after the GC released the first ticket')
  const r = await child
  assert.equal(r.code, 0, r.stderr)
  assert.match(r.stdout, /held bigint/)
  assert.equal(await t.release(), true)
})

test('works in worker_threads', async () => {
  const k = key('worker')
  const workers = [0, 1].map(
    () =>
      new Worker(
        `
const { parentPort, workerData } = require('node:worker_threads')
const { TicketBroker } = require(workerData.pkg)
;(async () => {
  const b = await TicketBroker.connect(workerData.addr)
  const tokens = []
  for (let i = 0; i < 5; i++) {
    await b.withLock(workerData.key, { wait: 30, lease: 10 }, async (t) => { tokens.push(t.token) })
  }
  await b.close()
  parentPort.postMessage(tokens)
})()`,
        { eval: true, workerData: { addr: srv.addr, key: k, pkg: require.resolve('ticketing') } },
      ),
  )
  const results = await Promise.all(
    workers.map(async (w) => {
      // Listen for 'exit' before awaiting the message: when the main thread
      // is slow, Node delivers a worker's last message while handling its
      // exit and emits 'exit' in the same tick, before a listener attached
      // after `await once(w, 'message')` would exist.
      const exited = once(w, 'exit')
      const [tokens] = await once(w, 'message')
      const [code] = await exited
      assert.equal(code, 0)
      return tokens
    }),
  )
  const all = results.flat()
  assert.equal(all.length, 10)
  for (const t of all) assert.equal(typeof t, 'bigint')
  assert.equal(new Set(all).size, 10, 'every grant has its own token')
  // The main thread's broker still works.
  const t = await broker.acquire(k, 5, 10)
  assert.ok(t && all.every((x) => x < t.token))
  assert.equal(await t.release(), true)
})

test('a worker terminated while its acquire waits does not take the process down', async () => {
  const k = key('term')
  const holder = await broker.acquire(k, 0, 30)
  const w = new Worker(
    `
const { parentPort, workerData } = require('node:worker_threads')
const { TicketBroker } = require(workerData.pkg)
;(async () => {
  const b = await TicketBroker.connect(workerData.addr)
  parentPort.postMessage('waiting')
  await b.acquire(workerData.key, 60, 10)
})()`,
    { eval: true, workerData: { addr: srv.addr, key: k, pkg: require.resolve('ticketing') } },
  )
  await once(w, 'message')
  await srv.waiters(k, 1)
  await w.terminate()
  assert.equal(await holder.release(), true)
  // Whatever the dead worker's acquire gets is released with it; the key is usable.
  const t = await broker.acquire(k, 30, 10)
  assert.ok(t)
  assert.equal(await t.release(), true)
})
