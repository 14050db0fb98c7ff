// The ESM entry: named imports work and are the very objects of the
// CommonJS entry (one module instance, one set of error classes).
import test from 'node:test'
import assert from 'node:assert/strict'
import { createRequire } from 'node:module'
import ticketing, { TicketBroker, TicketingError, BusyError, ForbiddenError, LockTimeoutError, version } from 'ticketing'

const require = createRequire(import.meta.url)

test('import { TicketBroker } from "ticketing" is require("ticketing").TicketBroker', () => {
  const cjs = require('ticketing')
  assert.equal(TicketBroker, cjs.TicketBroker)
  assert.equal(TicketingError, cjs.TicketingError)
  assert.equal(BusyError, cjs.BusyError)
  assert.equal(ForbiddenError, cjs.ForbiddenError)
  assert.equal(ticketing, cjs)
  assert.equal(typeof version, 'string')
  assert.ok(new LockTimeoutError('x') instanceof TicketingError)
})

test('the package resolved is the installed one, not the source tree', () => {
  const resolved = require.resolve('ticketing')
  assert.match(resolved, /node_modules[\\/]ticketing[\\/]index\.js$/)
})
