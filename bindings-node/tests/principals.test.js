// Principals (docs/security.md, "Several teams: principals"): a key outside
// the token's prefixes rejects with ForbiddenError carrying the key, never
// retried; the broker goes on serving allowed keys.
'use strict'
const test = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { TicketBroker, TicketingError, ForbiddenError } = require('ticketing')
const { Server } = require('./helpers.js')

let srv
let broker
let dir
test.before(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ticketing-principals-'))
  const tokens = path.join(dir, 'orders.tokens')
  fs.writeFileSync(tokens, 'orders-token\n')
  const config = path.join(dir, 'ticketing.toml')
  fs.writeFileSync(config, `[[principal]]\nname = "orders"\ntokens_file = ${JSON.stringify(tokens)}\nkeys = ["orders/"]\n`)
  srv = await Server.start(['--config', config])
  broker = new TicketBroker([srv.addr], { token: 'orders-token' })
  assert.equal(await broker.waitReady(10), true)
})
test.after(async () => {
  await broker?.close()
  await srv?.stop()
  if (dir) fs.rmSync(dir, { recursive: true, force: true })
})

test('a key outside the prefixes rejects with ForbiddenError and its key', async () => {
  await assert.rejects(broker.acquire('payments/1', 1, 10), (e) => {
    assert.ok(e instanceof ForbiddenError && e instanceof TicketingError)
    assert.equal(e.code, 'FORBIDDEN')
    assert.equal(e.key, 'payments/1')
    assert.match(e.message, /payments\/1/)
    return true
  })
  await assert.rejects(broker.acquireAll(['orders/1', 'payments/2'], 1, 10), (e) => {
    assert.ok(e instanceof ForbiddenError)
    assert.equal(e.key, 'payments/2')
    return true
  })
  const t = await broker.acquire('orders/1', 1, 10)
  assert.ok(t)
  assert.equal(await t.release(), true)
})
