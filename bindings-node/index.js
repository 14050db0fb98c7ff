// Client for Ticketing, a distributed FIFO lock service with fencing tokens.
//
// A thin layer over the native module (native.js, built from src/ with
// napi-rs), which drives the one Rust client (ticketing-client). This file
// only does what the JavaScript idiom needs: argument types, AbortSignal,
// typed errors, the with* forms, ticket.signal and Symbol.asyncDispose. Every rule
// of the protocol (rounding, ranges, routing, Indeterminate, the release
// lane) lives in the Rust client. See docs/node.md.
'use strict'

const native = require('./native.js')

// Node >= 18.18 and 20.4 define Symbol.asyncDispose; older ones get the
// same registered symbol TypeScript's downlevel `await using` looks up.
const asyncDispose = Symbol.asyncDispose || Symbol.for('Symbol.asyncDispose')

// ---------------------------------------------------------------------------
// Errors

/** Base class of every error the Ticketing client raises; `code` is stable. */
class TicketingError extends Error {
  constructor(message, options) {
    super(message, options)
    // An own property, as on Node core's errors; one value per class.
    Object.defineProperty(this, 'code', { value: new.target.code, enumerable: true })
  }

  get name() {
    return this.constructor.name
  }
}

function defineError(name, code) {
  const cls = {
    [name]: class extends TicketingError {},
  }[name]
  Object.defineProperty(cls, 'code', { value: code })
  return cls
}

Object.defineProperty(TicketingError, 'code', { value: 'TICKETING' })

// Each code once: a subclass for instanceof, its `code` a static that every
// instance copies into an own property.
const BusyError = defineError('BusyError', 'BUSY')
const ForbiddenError = defineError('ForbiddenError', 'FORBIDDEN')
const IndeterminateError = defineError('IndeterminateError', 'INDETERMINATE')
const InsufficientTimeError = defineError('InsufficientTimeError', 'INSUFFICIENT_TIME')
const UnavailableError = defineError('UnavailableError', 'UNAVAILABLE')
const ReleaseUnconfirmedError = defineError('ReleaseUnconfirmedError', 'RELEASE_UNCONFIRMED')
const ClosedError = defineError('ClosedError', 'CLOSED')
const AuthFailedError = defineError('AuthFailedError', 'AUTH_FAILED')
const LockTimeoutError = defineError('LockTimeoutError', 'LOCK_TIMEOUT')

const byCode = {
  BUSY: BusyError,
  FORBIDDEN: ForbiddenError,
  INDETERMINATE: IndeterminateError,
  INSUFFICIENT_TIME: InsufficientTimeError,
  UNAVAILABLE: UnavailableError,
  RELEASE_UNCONFIRMED: ReleaseUnconfirmedError,
  CLOSED: ClosedError,
  AUTH_FAILED: AuthFailedError,
}

// The native module rejects with a JS Error whose `code` property is the
// stable code (src/error.rs); this turns it into the typed error. The native
// error is kept as `cause`. Any other error (napi's own argument checks)
// passes unchanged.
const nativeCodes = new Set(['INVALID_ARGUMENT', 'ABORTED', 'TICKETING', ...Object.keys(byCode)])

function typed(err) {
  if (!(err instanceof Error) || !nativeCodes.has(err.code)) return err
  if (err.code === 'INVALID_ARGUMENT') return new RangeError(err.message, { cause: err })
  if (err.code === 'ABORTED') return new Error('the operation was aborted', { cause: err })
  const Cls = byCode[err.code] || TicketingError
  const typedErr = new Cls(err.message, { cause: err })
  // The key a principal may not use (set by the native module).
  if (Cls === ForbiddenError) Object.defineProperty(typedErr, 'key', { value: err.key, enumerable: true })
  return typedErr
}

function callSync(f) {
  try {
    return f()
  } catch (err) {
    throw typed(err)
  }
}

// ---------------------------------------------------------------------------
// Argument types (ranges are the client's: it rejects before sending)

function checkKey(key) {
  if (typeof key !== 'string') throw new TypeError(`key must be a string, got ${describe(key)}`)
}

function checkKeys(keys) {
  if (!Array.isArray(keys) || !keys.every((k) => typeof k === 'string')) {
    throw new TypeError(`keys must be an array of strings, got ${describe(keys)}`)
  }
}

function checkCount(name, value) {
  if (typeof value !== 'number') {
    throw new TypeError(`${name} must be a number, got ${describe(value)}`)
  }
}

function checkSeconds(name, value) {
  if (typeof value !== 'number') {
    throw new TypeError(`${name} must be a number of seconds, got ${describe(value)}`)
  }
}

function checkSignal(signal) {
  if (signal === undefined || signal === null) return undefined
  if (typeof signal !== 'object' || typeof signal.aborted !== 'boolean' || typeof signal.addEventListener !== 'function') {
    throw new TypeError(`signal must be an AbortSignal, got ${describe(signal)}`)
  }
  return signal
}

function checkOptions(name, options) {
  if (options === undefined || options === null) return {}
  if (typeof options !== 'object') throw new TypeError(`${name} must be an object, got ${describe(options)}`)
  return options
}

/**
 * The addresses as given: one string (the library splits it at its commas) or an
 * array of strings; anything else is a TypeError.
 */
function addrList(addrs) {
  const list = typeof addrs === 'string' ? [addrs] : addrs
  if (!Array.isArray(list) || !list.every((a) => typeof a === 'string')) {
    throw new TypeError(`addrs must be a "host:port" string or an array of them, got ${describe(addrs)}`)
  }
  return list
}

function describe(v) {
  if (v === null) return 'null'
  if (Array.isArray(v)) return 'an array'
  return typeof v
}

// ---------------------------------------------------------------------------
// Ticket

/** Reason of `ticket.signal` when the conservative deadline has passed. */
class TicketExpiredError extends Error {
  get name() {
    return 'TicketExpiredError'
  }
}
Object.defineProperty(TicketExpiredError.prototype, 'code', { value: 'TICKET_EXPIRED', enumerable: true })

// Longest single timer (setTimeout's limit is 2^31-1 ms).
const MAX_TIMER_MS = 2 ** 31 - 1

// An AbortSignal that aborts once `deadline` (performance.now() ms) has
// passed. Its timer is unref'd (it never keeps the process alive) and
// references only the controller, so the ticket can still be collected.
function deadlineSignal(deadline, key) {
  const controller = new AbortController()
  const fire = () => {
    const left = deadline - performance.now()
    if (left > 0) {
      setTimeout(fire, Math.min(Math.ceil(left), MAX_TIMER_MS)).unref()
      return
    }
    controller.abort(new TicketExpiredError(`the lease of ${JSON.stringify(key)} reached its conservative deadline`))
  }
  fire()
  return controller.signal
}

/**
 * A granted lock: `token` (bigint), `key`, `keys`, `slot`, `remaining()`,
 * `signal`, `release()`.
 */
class Ticket {
  #native
  #deadline
  #signal

  /** @internal Tickets come from `broker.acquire()` / `withLock()`. */
  constructor(nativeTicket) {
    if (!(nativeTicket instanceof native.NativeTicket)) {
      throw new TypeError('Ticket cannot be constructed directly; use broker.acquire()')
    }
    this.#native = nativeTicket
    this.#deadline = performance.now() + nativeTicket.remaining() * 1000
    this.token = nativeTicket.token
    this.key = nativeTicket.key
    this.keys = Object.freeze(nativeTicket.keys)
    this.slot = nativeTicket.slot
    Object.freeze(this)
  }

  /** Seconds left until the conservative deadline; 0 once expired. */
  remaining() {
    return this.#native.remaining()
  }

  /** True once the conservative deadline has passed. */
  get expired() {
    return this.#native.remaining() === 0
  }

  /** Aborts at the conservative deadline (reason: a TicketExpiredError). */
  get signal() {
    if (this.#signal === undefined) this.#signal = deadlineSignal(this.#deadline, this.keys.length > 1 ? this.keys : this.key)
    return this.#signal
  }

  /** Releases exactly this grant (every key): true, or false if it no longer held the lock. */
  async release() {
    try {
      return await this.#native.release()
    } catch (err) {
      throw typed(err)
    }
  }

  async [asyncDispose]() {
    await this.release()
  }

  get [Symbol.toStringTag]() {
    return 'Ticket'
  }
}

// ---------------------------------------------------------------------------
// TicketBroker

// acquire*(…, { signal }): the options may come in the budget's place.
function budgetOrOptions(budget, options) {
  if (budget !== null && typeof budget === 'object' && options === undefined) return [0, budget]
  return [budget, options]
}

function checkFn(name, fn) {
  if (typeof fn !== 'function') throw new TypeError(`${name} needs a function, got ${describe(fn)}`)
}

// The body of every with* form: LockTimeoutError on `T` (null), else runs
// `fn(ticket)` and releases the ticket afterwards, also when `fn` throws.
async function scoped(ticket, what, wait, fn) {
  if (ticket === null) {
    throw new LockTimeoutError(`${what} not granted within wait=${wait} s`)
  }
  let value
  try {
    value = await fn(ticket)
  } catch (err) {
    // The body's error wins; the lease ends the lock at the latest.
    await ticket.release().catch(() => {})
    throw err
  }
  await ticket.release()
  return value
}

const fromNative = Symbol('fromNative')

/** A connection pool and router to a Ticketing server or cluster. */
class TicketBroker {
  #native

  /**
   * new TicketBroker(addrs, { token, tls, tlsClientCert, tlsClientKey }): addrs is an array of
   * "host:port" (all cluster members) or one string (one address, or several separated by
   * commas). Never blocks.
   */
  constructor(addrs, options) {
    if (addrs === fromNative) {
      this.#native = options
      return
    }
    addrs = addrList(addrs)
    const { token, tls, tlsClientCert, tlsClientKey } = checkOptions('options', options)
    if (token !== undefined && token !== null && typeof token !== 'string') {
      throw new TypeError(`token must be a string, got ${describe(token)}`)
    }
    if (tls !== undefined && tls !== null && typeof tls !== 'string') {
      throw new TypeError(`tls must be a string, got ${describe(tls)}`)
    }
    for (const [name, v] of [['tlsClientCert', tlsClientCert], ['tlsClientKey', tlsClientKey]]) {
      if (v !== undefined && v !== null && typeof v !== 'string') {
        throw new TypeError(`${name} must be a string path, got ${describe(v)}`)
      }
    }
    this.#native = callSync(
      () => new native.NativeBroker(addrs, token ?? null, tls ?? null, tlsClientCert ?? null, tlsClientKey ?? null),
    )
  }

  /**
   * A broker for one address, or several (an array, or one comma-separated
   * string); resolves once the first connection attempts settled.
   */
  static async connect(addrs) {
    const list = addrList(addrs)
    try {
      return new TicketBroker(fromNative, await native.NativeBroker.connect(list))
    } catch (err) {
      throw typed(err)
    }
  }

  /** Resolves to true once a request can be routed (within `seconds`). */
  async waitReady(seconds) {
    checkSeconds('seconds', seconds)
    try {
      return await this.#native.waitReady(seconds)
    } catch (err) {
      throw typed(err)
    }
  }

  /**
   * Acquires `key`: a Ticket, or null when not granted within `wait`
   * seconds. `options.signal` (an AbortSignal) cancels the acquire. The
   * options may also come fourth, with the budget left out (0).
   */
  async acquire(key, wait, lease, budget = 0, options) {
    ;[budget, options] = budgetOrOptions(budget, options)
    checkKey(key)
    return this.#granting(wait, lease, budget, options, (c) => this.#native.acquire(key, wait, lease, budget, c))
  }

  /**
   * A counted grant of `key`, at most `n` holders at once (a semaphore of
   * `n` permits): a Ticket with `slot` (0 ≤ slot < n), or null when not
   * granted within `wait`. Options and budget as in `acquire`.
   */
  async acquireShared(key, n, wait, lease, budget = 0, options) {
    ;[budget, options] = budgetOrOptions(budget, options)
    checkKey(key)
    checkCount('n', n)
    return this.#granting(wait, lease, budget, options, (c) =>
      this.#native.acquireShared(key, n, wait, lease, budget, c),
    )
  }

  /**
   * All of `keys` (2–16 distinct keys) exclusively and atomically: one
   * Ticket with one token whose `release()` frees every key, or null when
   * not granted within `wait`. Options and budget as in `acquire`.
   */
  async acquireAll(keys, wait, lease, budget = 0, options) {
    ;[budget, options] = budgetOrOptions(budget, options)
    checkKeys(keys)
    return this.#granting(wait, lease, budget, options, (c) =>
      this.#native.acquireAll([...keys], wait, lease, budget, c),
    )
  }

  // The common part of every acquire: argument types, the AbortSignal and
  // the errors around `call(canceller)` (a native acquire-like method).
  async #granting(wait, lease, budget, options, call) {
    checkSeconds('wait', wait)
    checkSeconds('lease', lease)
    checkSeconds('budget', budget)
    const signal = checkSignal(checkOptions('options', options).signal)
    if (signal?.aborted) throw signal.reason
    const canceller = signal ? new native.Canceller() : null
    const onAbort = () => canceller.cancel()
    signal?.addEventListener('abort', onAbort, { once: true })
    let got
    try {
      got = await call(canceller)
    } catch (err) {
      // Aborted before the acquire settled: whatever the client reports
      // (the cancel itself, or INDETERMINATE/CLOSED from the connection
      // the cancel closed), the caller sees the abort.
      if (signal?.aborted) throw signal.reason
      throw typed(err)
    } finally {
      signal?.removeEventListener('abort', onAbort)
    }
    const ticket = got === null ? null : new Ticket(got)
    if (ticket && signal?.aborted) {
      // Aborted (in JS order) before the grant reached us: the caller gets
      // the abort, the grant is released in the background.
      ticket.release().catch(() => {})
      throw signal.reason
    }
    return ticket
  }

  /**
   * Runs `fn(ticket)` holding the lock on `key` and releases it afterwards
   * (also when `fn` throws). Rejects with LockTimeoutError when the lock was
   * not granted within `wait`. Resolves to what `fn` returns.
   */
  async withLock(key, options, fn) {
    checkFn('withLock', fn)
    const { wait, lease, budget = 0, signal } = checkOptions('options', options)
    const ticket = await this.acquire(key, wait, lease, budget, { signal })
    return scoped(ticket, `lock ${JSON.stringify(key)}`, wait, fn)
  }

  /** `withLock` for a counted grant (`acquireShared(key, n, …)`). */
  async withSharedLock(key, n, options, fn) {
    checkFn('withSharedLock', fn)
    const { wait, lease, budget = 0, signal } = checkOptions('options', options)
    const ticket = await this.acquireShared(key, n, wait, lease, budget, { signal })
    return scoped(ticket, `shared lock ${JSON.stringify(key)} (n=${n})`, wait, fn)
  }

  /** `withLock` for all of `keys` at once (`acquireAll(keys, …)`). */
  async withAllLocks(keys, options, fn) {
    checkFn('withAllLocks', fn)
    const { wait, lease, budget = 0, signal } = checkOptions('options', options)
    const ticket = await this.acquireAll(keys, wait, lease, budget, { signal })
    return scoped(ticket, `locks ${JSON.stringify(keys)}`, wait, fn)
  }

  /**
   * `withLock` for the shared (read) side of a read/write lock on `key`:
   * readers hold it together, a writer (`withWriteLock`) waits for them and
   * they for it, in FIFO order.
   */
  async withReadLock(key, options, fn) {
    checkFn('withReadLock', fn)
    const { wait, lease, budget = 0, signal } = checkOptions('options', options)
    checkKey(key)
    const ticket = await this.#granting(wait, lease, budget, { signal }, (c) =>
      this.#native.readLock(key, wait, lease, budget, c),
    )
    return scoped(ticket, `read lock ${JSON.stringify(key)}`, wait, fn)
  }

  /** `withLock` for the exclusive (write) side of a read/write lock on `key`. */
  async withWriteLock(key, options, fn) {
    checkFn('withWriteLock', fn)
    const { wait, lease, budget = 0, signal } = checkOptions('options', options)
    checkKey(key)
    const ticket = await this.#granting(wait, lease, budget, { signal }, (c) =>
      this.#native.writeLock(key, wait, lease, budget, c),
    )
    return scoped(ticket, `write lock ${JSON.stringify(key)}`, wait, fn)
  }

  /** Closes the broker: live tickets are released best-effort. Idempotent. */
  async close() {
    try {
      await this.#native.close()
    } catch (err) {
      throw typed(err)
    }
  }

  async [asyncDispose]() {
    await this.close()
  }

  get [Symbol.toStringTag]() {
    return 'TicketBroker'
  }
}

module.exports = {
  TicketBroker,
  Ticket,
  TicketingError,
  BusyError,
  ForbiddenError,
  IndeterminateError,
  InsufficientTimeError,
  UnavailableError,
  ReleaseUnconfirmedError,
  ClosedError,
  AuthFailedError,
  LockTimeoutError,
  TicketExpiredError,
  version: native.version(),
}
