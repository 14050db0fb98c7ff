// A 3-node cluster: an acquire waiting at the leader when it is killed
// ends in a Ticket or IndeterminateError, never null, a hang, or a wrong
// Ticket (one the new leader does not show as the holder); acquires after
// the failover are granted with larger tokens.
'use strict'
const test = require('node:test')
const assert = require('node:assert/strict')
const { TicketBroker, Ticket, IndeterminateError, UnavailableError } = require('ticketing')
const { Cluster, adminGet, within } = require('./helpers.js')

test('an acquire across a leader kill: a Ticket or INDETERMINATE, never a wrong Ticket', async () => {
  const cluster = await Cluster.start()
  let broker
  try {
    const leader = await cluster.leader(30000).catch((e) => {
      throw new Error(`${e.message}\n${cluster.output()}`)
    })
    broker = new TicketBroker(cluster.client)
    assert.equal(await broker.waitReady(10), true)
    const first = await broker.acquire('cluster-key-1', 5, 30)
    assert.ok(first instanceof Ticket)

    // Queued behind `first` at the leader when it dies.
    const inFlight = broker.acquire('cluster-key-1', 20, 5).then((t) => t, (e) => e)
    await within(10000, async () => {
      const res = await adminGet(cluster.admin[leader], '/locks/cluster-key-1')
      return res && res.status === 200 && res.body.waiters.length === 1
    }, 'the waiter queued at the leader')

    cluster.procs[leader].kill('SIGKILL')
    const t0 = Date.now()
    let timer
    const hang = new Promise((resolve) => (timer = setTimeout(resolve, 40000, 'hang')))
    const outcome = await Promise.race([inFlight, hang])
    clearTimeout(timer)
    assert.notEqual(outcome, 'hang', 'the acquire hung across the leader kill')
    assert.ok(outcome instanceof Ticket || outcome instanceof IndeterminateError, `got ${outcome}`)

    // Acquires across the failover: Ticket, null, INDETERMINATE or UNAVAILABLE;
    // within a bounded time the new leader grants one.
    const outcomes = []
    let got = null
    for (let i = 0; i < 100 && got === null && Date.now() - t0 < 40000; i++) {
      try {
        got = await broker.acquire('cluster-key-2', 5, 10)
        outcomes.push(got ? 'ticket' : 'none')
      } catch (e) {
        if (!(e instanceof IndeterminateError || e instanceof UnavailableError)) throw e
        outcomes.push(e.code)
      }
    }
    assert.ok(got, `no grant after the failover: ${outcomes}\n${cluster.output()}`)
    assert.ok(got.token > first.token, 'tokens increase across the leader change')

    // A Ticket is never wrong: the serving leader shows exactly that holder.
    const now = await cluster.leader(30000)
    assert.notEqual(now, leader)
    const held = await adminGet(cluster.admin[now], '/locks/cluster-key-2')
    assert.equal(held.body.holder.token, Number(got.token))
    if (outcome instanceof Ticket) {
      const k1 = await adminGet(cluster.admin[now], '/locks/cluster-key-1')
      assert.equal(k1.body.holder?.token, Number(outcome.token), 'the in-flight Ticket is the real holder')
    }
    assert.equal(await got.release(), true)
    console.log(`in-flight: ${outcome.constructor.name}; failover outcomes: ${outcomes}; granted after ${Date.now() - t0} ms`)
  } finally {
    await broker?.close()
    await cluster.stop()
  }
})
