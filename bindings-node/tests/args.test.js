// Every bad argument: TypeError for a wrong type, RangeError for a bad
// value, raised before anything is sent. The broker here points at a port
// where nothing listens: a validation error comes back at once instead of
// UNAVAILABLE, so it was decided before any connection was needed.
'use strict'
const test = require('node:test')
const assert = require('node:assert/strict')
const { TicketBroker, TicketingError } = require('ticketing')
const { deadAddr, Server, key } = require('./helpers.js')

let broker
test.before(async () => {
  broker = new TicketBroker([await deadAddr()])
})
test.after(async () => {
  await broker?.close()
})

async function rejectsWith(Cls, promise, pattern) {
  await assert.rejects(promise, (e) => {
    assert.ok(e instanceof Cls, `expected ${Cls.name}, got ${e && e.constructor.name}: ${e && e.message}`)
    assert.ok(!(e instanceof TicketingError))
    if (pattern) assert.match(e.message, pattern)
    return true
  })
}

const typeCases = [
  ['key is a number', () => broker.acquire(42, 1, 10), /key must be a string/],
  ['key is undefined', () => broker.acquire(undefined, 1, 10), /key/],
  ['key is a Buffer', () => broker.acquire(Buffer.from('k'), 1, 10), /key/],
  ['wait is a string', () => broker.acquire('k', '1', 10), /wait must be a number/],
  ['wait is a bigint', () => broker.acquire('k', 1n, 10), /wait/],
  ['wait is missing', () => broker.acquire('k'), /wait/],
  ['lease is null', () => broker.acquire('k', 1, null), /lease/],
  ['lease is missing', () => broker.acquire('k', 1), /lease/],
  ['budget is a string', () => broker.acquire('k', 1, 10, '2'), /budget/],
  ['options is a string', () => broker.acquire('k', 1, 10, 0, 'x'), /options/],
  ['signal is not an AbortSignal', () => broker.acquire('k', 1, 10, 0, { signal: {} }), /signal must be an AbortSignal/],
  ['signal is a controller', () => broker.acquire('k', 1, 10, 0, { signal: new AbortController() }), /signal/],
  ['waitReady with a string', () => broker.waitReady('5'), /seconds must be a number/],
  ['withLock without a function', () => broker.withLock('k', { wait: 1, lease: 5 }), /function/],
  ['withLock with a string wait', () => broker.withLock('k', { wait: '1', lease: 5 }, () => 1), /wait/],
  ['withLock without options', () => broker.withLock('k', undefined, () => 1), /wait/],
  ['connect with a number', () => TicketBroker.connect(5225), /addrs must be/],
  ['connect with a number in the array', () => TicketBroker.connect(['127.0.0.1:1', 2]), /addrs must be/],
  // Counted and multi-key grants.
  ['acquireShared: key is a number', () => broker.acquireShared(1, 2, 1, 10), /key must be a string/],
  ['acquireShared: n is a string', () => broker.acquireShared('k', '2', 1, 10), /n must be a number/],
  ['acquireShared: n is a bigint', () => broker.acquireShared('k', 2n, 1, 10), /n must be a number/],
  ['acquireShared: n is missing', () => broker.acquireShared('k'), /n must be a number/],
  ['acquireShared: wait is missing', () => broker.acquireShared('k', 2), /wait/],
  ['acquireShared: bad signal', () => broker.acquireShared('k', 2, 1, 10, 0, { signal: 1 }), /signal must be an AbortSignal/],
  ['acquireAll: keys is a string', () => broker.acquireAll('a b', 1, 10), /keys must be an array of strings/],
  ['acquireAll: keys is missing', () => broker.acquireAll(), /keys must be an array/],
  ['acquireAll: a key is a number', () => broker.acquireAll(['a', 2], 1, 10), /keys must be an array of strings/],
  ['acquireAll: keys is a Set', () => broker.acquireAll(new Set(['a', 'b']), 1, 10), /keys must be an array/],
  ['acquireAll: lease is a string', () => broker.acquireAll(['a', 'b'], 1, '10'), /lease must be a number/],
  ['withSharedLock without a function', () => broker.withSharedLock('k', 2, { wait: 1, lease: 5 }), /withSharedLock needs a function/],
  ['withSharedLock with a string n', () => broker.withSharedLock('k', '2', { wait: 1, lease: 5 }, () => 1), /n must be a number/],
  ['withAllLocks without a function', () => broker.withAllLocks(['a', 'b'], { wait: 1, lease: 5 }), /withAllLocks needs a function/],
  ['withAllLocks with one string', () => broker.withAllLocks('a', { wait: 1, lease: 5 }, () => 1), /keys must be an array/],
  ['withReadLock without a function', () => broker.withReadLock('k', { wait: 1, lease: 5 }), /withReadLock needs a function/],
  ['withReadLock with a number key', () => broker.withReadLock(7, { wait: 1, lease: 5 }, () => 1), /key must be a string/],
  ['withReadLock without options', () => broker.withReadLock('k', undefined, () => 1), /wait/],
  ['withWriteLock without a function', () => broker.withWriteLock('k', { wait: 1, lease: 5 }), /withWriteLock needs a function/],
  ['withWriteLock with a string wait', () => broker.withWriteLock('k', { wait: '1', lease: 5 }, () => 1), /wait must be a number/],
]
for (const [name, call, pattern] of typeCases) {
  test(`TypeError: ${name}`, async () => {
    await rejectsWith(TypeError, call(), pattern)
  })
}

const rangeCases = [
  ['empty key', () => broker.acquire('', 1, 10), /key/],
  ['key with a space', () => broker.acquire('bad key', 1, 10), /key/],
  ['key with a non-ASCII character', () => broker.acquire('clé', 1, 10), /key/],
  ['key with a newline', () => broker.acquire('k\n', 1, 10), /key/],
  ['key of 251 bytes', () => broker.acquire('k'.repeat(251), 1, 10), /key/],
  ['negative wait', () => broker.acquire('k', -1, 10), /wait/],
  ['negative fraction wait', () => broker.acquire('k', -0.1, 10), /wait/],
  ['NaN wait', () => broker.acquire('k', NaN, 10), /wait/],
  ['infinite wait', () => broker.acquire('k', Infinity, 10), /wait/],
  ['wait 256', () => broker.acquire('k', 256, 10), /wait/],
  ['wait 255.5 (rounds up to 256, never clamped)', () => broker.acquire('k', 255.5, 10), /wait/],
  ['lease 0', () => broker.acquire('k', 1, 0), /lease/],
  ['negative lease', () => broker.acquire('k', 1, -5), /lease/],
  ['lease 251', () => broker.acquire('k', 1, 251), /lease/],
  ['lease 250.1 (rounds up to 251)', () => broker.acquire('k', 1, 250.1), /lease/],
  ['NaN lease', () => broker.acquire('k', 1, NaN), /lease/],
  ['budget above lease', () => broker.acquire('k', 1, 10, 11), /budget/],
  ['budget 10.5 with lease 10 (rounds up to 11)', () => broker.acquire('k', 1, 10, 10.5), /budget/],
  ['negative budget', () => broker.acquire('k', 1, 10, -1), /budget/],
  ['-Infinity budget', () => broker.acquire('k', 1, 10, -Infinity), /budget/],
  ['waitReady(-1)', () => broker.waitReady(-1), /seconds/],
  ['waitReady(NaN)', () => broker.waitReady(NaN), /seconds/],
  ['connect to an address without a port', () => TicketBroker.connect('localhost'), /addr|port/],
  ['withLock with lease 0', () => broker.withLock('k', { wait: 0, lease: 0 }, () => 1), /lease/],
  // Counted grants: n is an integer 1-65535 (the client checks the range).
  ['acquireShared: n 0', () => broker.acquireShared('k', 0, 1, 10), /^n must be within 1\.\.=65535, got 0$/],
  ['acquireShared: n -1', () => broker.acquireShared('k', -1, 1, 10), /n must be within 1\.\.=65535, got -1/],
  ['acquireShared: n 65536', () => broker.acquireShared('k', 65536, 1, 10), /n must be within 1\.\.=65535, got 65536/],
  ['acquireShared: n 1.5 (not an integer, never rounded)', () => broker.acquireShared('k', 1.5, 1, 10), /n must be an integer, got 1\.5/],
  ['acquireShared: n NaN', () => broker.acquireShared('k', NaN, 1, 10), /n must be an integer/],
  ['acquireShared: n Infinity', () => broker.acquireShared('k', Infinity, 1, 10), /n must be an integer/],
  ['acquireShared: n 2^60', () => broker.acquireShared('k', 2 ** 60, 1, 10), /n must be an integer/],
  ['acquireShared: bad key', () => broker.acquireShared('bad key', 2, 1, 10), /key/],
  ['acquireShared: lease 0', () => broker.acquireShared('k', 2, 1, 0), /lease/],
  ['acquireShared: budget above lease', () => broker.acquireShared('k', 2, 1, 10, 11), /budget/],
  ['withSharedLock: n 0', () => broker.withSharedLock('k', 0, { wait: 1, lease: 5 }, () => 1), /n must be within/],
  // Multi-key grants: 2-16 distinct valid keys, the request within 512 bytes.
  ['acquireAll: no keys', () => broker.acquireAll([], 1, 10), /2-16 keys, got 0/],
  ['acquireAll: one key', () => broker.acquireAll(['a'], 1, 10), /2-16 keys, got 1/],
  ['acquireAll: 17 keys', () => broker.acquireAll(Array.from({ length: 17 }, (_, i) => `k${i}`), 1, 10), /2-16 keys, got 17/],
  ['acquireAll: a key twice', () => broker.acquireAll(['a', 'b', 'a'], 1, 10), /key "a" is given twice/],
  ['acquireAll: a bad key', () => broker.acquireAll(['a', 'bad key'], 1, 10), /visible ASCII.*"bad key"/],
  ['acquireAll: an empty key', () => broker.acquireAll(['a', ''], 1, 10), /visible ASCII.*""/],
  ['acquireAll: over 512 bytes', () => broker.acquireAll(['a', 'b', 'c'].map((c) => c.repeat(200)), 1, 10), /over the 512-byte frame limit/],
  ['acquireAll: wait 256', () => broker.acquireAll(['a', 'b'], 256, 10), /wait/],
  ['withAllLocks: one key', () => broker.withAllLocks(['a'], { wait: 1, lease: 5 }, () => 1), /2-16 keys/],
  ['withReadLock: bad key', () => broker.withReadLock('a b', { wait: 1, lease: 5 }, () => 1), /key/],
  ['withWriteLock: lease 0', () => broker.withWriteLock('k', { wait: 1, lease: 0 }, () => 1), /lease/],
]
for (const [name, call, pattern] of rangeCases) {
  test(`RangeError: ${name}`, async () => {
    await rejectsWith(RangeError, call(), pattern)
  })
}

test('constructor: TypeError for wrong types, RangeError for bad values, thrown synchronously', () => {
  assert.throws(() => new TicketBroker(5), TypeError)
  assert.throws(() => new TicketBroker([5]), TypeError)
  assert.throws(() => new TicketBroker(['127.0.0.1:1'], 'token'), TypeError)
  assert.throws(() => new TicketBroker(['127.0.0.1:1'], { token: 123 }), TypeError)
  assert.throws(() => new TicketBroker(['127.0.0.1:1'], { tls: true }), TypeError)
  assert.throws(() => new TicketBroker([]), RangeError)
  assert.throws(() => new TicketBroker(['no-port']), (e) => {
    // The native error's code is a property (never parsed out of the text).
    assert.ok(e instanceof RangeError, String(e))
    assert.equal(e.cause.code, 'INVALID_ARGUMENT')
    assert.equal(e.message, 'address "no-port" must be host:port with a port in 1-65535')
    return true
  })
  assert.throws(() => new TicketBroker(['127.0.0.1:1'], { tls: '' }), RangeError)
  assert.throws(() => new TicketBroker(['127.0.0.1:1'], { tls: '/nonexistent/ca.pem' }), RangeError)
})

test('connect takes one comma-separated string or an array (as TICKETING_ADDR holds them)', async () => {
  const srv = await Server.start()
  // A dead address first: the broker routes to the live one.
  const dead = await deadAddr()
  try {
    for (const addrs of [`${dead}, ${srv.addr}`, [dead, srv.addr]]) {
      const b = await TicketBroker.connect(addrs)
      try {
        assert.equal(await b.waitReady(5), true)
        const t = await b.acquire(key(), 5, 10)
        assert.ok(t)
        assert.equal(await t.release(), true)
      } finally {
        await b.close()
      }
    }
  } finally {
    await srv.stop()
  }
})

test('fractions are accepted and rounded up, never clamped: on a real server', async () => {
  const srv = await Server.start()
  const b = await TicketBroker.connect(srv.addr)
  try {
    const t = await b.acquire(key(), 254.2, 249.5, 248.1) // → 255, 250, 249
    assert.ok(t.remaining() > 249 && t.remaining() <= 250, `remaining ${t.remaining()}`)
    assert.equal(await t.release(), true)
  } finally {
    await b.close()
    await srv.stop()
  }
})
