// 50 concurrent acquirers on one key, queued one after the other (each
// waits until the server shows the previous one queued), are granted in
// FIFO order with strictly increasing bigint tokens.
'use strict'
const test = require('node:test')
const assert = require('node:assert/strict')
const { TicketBroker } = require('ticketing')
const { Server, key } = require('./helpers.js')

test('50 concurrent acquires on one key: FIFO, strictly increasing tokens', async () => {
  const N = 50
  const srv = await Server.start()
  const brokers = [await TicketBroker.connect(srv.addr), await TicketBroker.connect(srv.addr)]
  try {
    const k = key('fifo')
    const holder = await brokers[0].acquire(k, 0, 60)
    const order = []
    const runs = []
    for (let i = 0; i < N; i++) {
      const b = brokers[i % 2]
      runs.push(
        b.acquire(k, 120, 60).then(async (t) => {
          assert.ok(t, `acquirer ${i} was granted`)
          order.push({ i, token: t.token })
          assert.equal(await t.release(), true)
        }),
      )
      await srv.waiters(k, i + 1)
    }
    assert.equal(await holder.release(), true)
    await Promise.all(runs)
    assert.deepEqual(order.map((o) => o.i), [...Array(N).keys()], 'granted in arrival order')
    let last = holder.token
    for (const { token } of order) {
      assert.equal(typeof token, 'bigint')
      assert.ok(token > last, `token ${token} > ${last}`)
      last = token
    }
  } finally {
    await Promise.all(brokers.map((b) => b.close()))
    await srv.stop()
  }
})
