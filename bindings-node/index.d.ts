// Types of the public API of the `ticketing` package (index.js). The native
// module's generated types are in native.d.ts (private). The ES-module entry
// (index.mjs) has the same named exports, and its default export is this
// CommonJS module itself, which is how TypeScript (module NodeNext) types a
// default import of this file: `import ticketing from 'ticketing'` checks.
/// <reference types="node" />

/** A duration in seconds; fractions are rounded UP to whole seconds. */
export type Seconds = number

/** The stable `code` of every TicketingError. */
export type TicketingErrorCode =
  | 'BUSY'
  | 'FORBIDDEN'
  | 'INDETERMINATE'
  | 'INSUFFICIENT_TIME'
  | 'UNAVAILABLE'
  | 'RELEASE_UNCONFIRMED'
  | 'CLOSED'
  | 'AUTH_FAILED'
  | 'LOCK_TIMEOUT'
  | 'TICKETING'

/** Options of `new TicketBroker(addrs, options)`. */
export interface BrokerOptions {
  /** The shared client token (default: none). It never crosses the network. */
  token?: string | null
  /**
   * `"off"` (default), `"system-roots"`, a path to a CA file (PEM), or
   * `"insecure-skip-verify"` (tests only).
   */
  tls?: string | null
  /**
   * A client certificate (PEM file path) for a server that requires one
   * (`--tls-client-ca`); with `tlsClientKey` and a TLS mode other than `"off"`.
   */
  tlsClientCert?: string | null
  /** The private key (PEM file path) of `tlsClientCert`. */
  tlsClientKey?: string | null
}

/** Options of `broker.acquire(…)`. */
export interface AcquireOptions {
  /**
   * Cancels the acquire when aborted: not yet sent → nothing happens;
   * possibly sent → the client closes that connection (the server drops the
   * waiter) and releases a grant that still arrives. The promise rejects
   * with `signal.reason`; an already-aborted signal rejects at once and
   * nothing is sent.
   */
  signal?: AbortSignal | null
}

/** Options of `broker.withLock(key, options, fn)` and the other scoped forms (`withSharedLock`, `withAllLocks`, `withReadLock`, `withWriteLock`). */
export interface LockOptions extends AcquireOptions {
  /** At most this long in the server's FIFO queue (0–255; 0 = one immediate attempt). */
  wait: Seconds
  /** The lease (1–250). */
  lease: Seconds
  /** The least work time the ticket must leave (0–lease, default 0). */
  budget?: Seconds
}

/** A connection pool and router to a Ticketing server or cluster. */
export declare class TicketBroker implements AsyncDisposable {
  /**
   * A broker for `addrs` (`"host:port"`; every member of a cluster, also
   * the allowlist for leader hints), or a single address. Never blocks: it
   * connects in the background (see `waitReady`).
   * @throws {TypeError} a non-string address, token, tls or client certificate path
   * @throws {RangeError} a bad address or TLS option, an unreadable client
   *   certificate or key, or only one of them
   */
  constructor(addrs: string | readonly string[], options?: BrokerOptions)

  /**
   * A broker for one address, or several: an array, or one string with the
   * addresses separated by commas, as `TICKETING_ADDR` holds them (two
   * connections to each). Resolves once a
   * request could be routed or the first connection attempts have settled
   * (at most 5 s); a broker is returned either way and keeps reconnecting.
   */
  static connect(addrs: string | readonly string[]): Promise<TicketBroker>

  /** Resolves to true once a request can be routed, false after `seconds` (or when closed). */
  waitReady(seconds: Seconds): Promise<boolean>

  /**
   * Acquires the lock on `key` (1–250 visible ASCII bytes): waits up to
   * `wait` seconds in the FIFO queue; the grant lives `lease` seconds;
   * `budget` is the least time the caller needs once granted.
   *
   * Resolves to a Ticket, or `null` when not granted within `wait`.
   * Rejects with BusyError, ForbiddenError (this token may not use `key`;
   * `err.key` names it), IndeterminateError (do NOT enter the critical
   * section), InsufficientTimeError, UnavailableError, ClosedError,
   * AuthFailedError; with TypeError/RangeError for bad arguments (nothing
   * is sent); with `signal.reason` when aborted.
   */
  acquire(key: string, wait: Seconds, lease: Seconds, budget?: Seconds, options?: AcquireOptions): Promise<Ticket | null>
  /** `acquire(key, wait, lease, { signal })`: the budget left out (0). */
  acquire(key: string, wait: Seconds, lease: Seconds, options: AcquireOptions): Promise<Ticket | null>

  /**
   * A counted grant of `key`: at most `n` holders at once (a semaphore of
   * `n` permits, `n` an integer 1–65535). The ticket has its own token and
   * a `slot` (0 ≤ slot < n, the lowest one no current holder has), so work
   * can be fenced per (key, slot). Requests with different `n` on one key
   * are each granted by their own `n`; an exclusive `acquire` of the key
   * waits for every counted holder, and they for it (FIFO, no overtaking).
   *
   * Resolves and rejects as `acquire` (TypeError for a non-number `n`,
   * RangeError for a fraction or a value outside 1–65535).
   */
  acquireShared(key: string, n: number, wait: Seconds, lease: Seconds, budget?: Seconds, options?: AcquireOptions): Promise<Ticket | null>
  /** `acquireShared(key, n, wait, lease, { signal })`: the budget left out (0). */
  acquireShared(key: string, n: number, wait: Seconds, lease: Seconds, options: AcquireOptions): Promise<Ticket | null>

  /**
   * All of `keys` (2–16 distinct keys, the request within 512 bytes)
   * exclusively and atomically: ONE ticket with ONE token that fences each
   * key; `ticket.keys` lists them, `release()` frees every key. It waits in
   * every key's queue and never deadlocks, whatever the key order.
   *
   * Resolves and rejects as `acquire` (TypeError for a non-array or a
   * non-string key, RangeError for a bad count, a key twice or a bad key).
   */
  acquireAll(keys: readonly string[], wait: Seconds, lease: Seconds, budget?: Seconds, options?: AcquireOptions): Promise<Ticket | null>
  /** `acquireAll(keys, wait, lease, { signal })`: the budget left out (0). */
  acquireAll(keys: readonly string[], wait: Seconds, lease: Seconds, options: AcquireOptions): Promise<Ticket | null>

  /**
   * Runs `fn(ticket)` while holding the lock and releases it afterwards,
   * also when `fn` throws (then `fn`'s error wins). Resolves to `fn`'s
   * value. Rejects with LockTimeoutError when not granted within `wait`,
   * or with any error of `acquire`.
   */
  withLock<T>(key: string, options: LockOptions, fn: (ticket: Ticket) => T | PromiseLike<T>): Promise<T>

  /** `withLock` for a counted grant: `acquireShared(key, n, …)`. */
  withSharedLock<T>(key: string, n: number, options: LockOptions, fn: (ticket: Ticket) => T | PromiseLike<T>): Promise<T>

  /** `withLock` for all of `keys` at once: `acquireAll(keys, …)`. */
  withAllLocks<T>(keys: readonly string[], options: LockOptions, fn: (ticket: Ticket) => T | PromiseLike<T>): Promise<T>

  /**
   * `withLock` holding the shared (read) side of a read/write lock on
   * `key`: any number of readers hold it together; a writer
   * (`withWriteLock`) waits for them, and readers that come after a waiting
   * writer wait for it (FIFO, so writers never starve).
   */
  withReadLock<T>(key: string, options: LockOptions, fn: (ticket: Ticket) => T | PromiseLike<T>): Promise<T>

  /** `withLock` holding the exclusive (write) side of a read/write lock on `key`. */
  withWriteLock<T>(key: string, options: LockOptions, fn: (ticket: Ticket) => T | PromiseLike<T>): Promise<T>

  /**
   * Closes the broker: pending acquires reject with ClosedError, live
   * tickets are released best-effort, the connections close; later calls
   * reject with ClosedError. Idempotent. Afterwards nothing of this broker
   * keeps the process alive.
   */
  close(): Promise<void>

  /** `await using broker = …` closes it. */
  [Symbol.asyncDispose](): Promise<void>
}

/** A granted lock. */
export declare class Ticket implements AsyncDisposable {
  private constructor()
  /** The fencing token: strictly increasing over all grants (1 ≤ token < 2^63). */
  readonly token: bigint
  /** The key this ticket holds (the first of `keys`). */
  readonly key: string
  /** Every key this ticket holds: one, or all keys of `acquireAll` in the order given (frozen). */
  readonly keys: readonly string[]
  /** The slot of a counted grant (`acquireShared`, read locks), 0 ≤ slot < n; null for an exclusive grant. */
  readonly slot: number | null
  /** Seconds left until the conservative deadline; 0 once expired. */
  remaining(): number
  /** True once the conservative deadline has passed. */
  readonly expired: boolean
  /**
   * Aborts at the conservative deadline (reason: a TicketExpiredError):
   * pass it to `fetch`, database clients or timers so work stops when the
   * lock is no longer guaranteed. Its timer never keeps the process alive.
   */
  readonly signal: AbortSignal
  /**
   * Releases exactly this grant, every key of it: true when released, false
   * when it no longer held the lock (expired, or released before; for
   * several keys: any of them). Rejects with
   * ReleaseUnconfirmedError without a final answer within 5 s, with
   * ForbiddenError when the server answered that this token may no longer
   * use the key (final). A second call resolves to the first definite result.
   */
  release(): Promise<boolean>
  /** `await using ticket = …` releases it. */
  [Symbol.asyncDispose](): Promise<void>
}

/** Base class of every error the client raises, with a stable `code`. */
export declare class TicketingError extends Error {
  /** The stable machine-readable code of this error; one subclass per code. */
  readonly code: TicketingErrorCode
}
/** The server refused the acquire for capacity. Final, never retried internally. */
export declare class BusyError extends TicketingError {
  /** Always `'BUSY'`. */
  readonly code: 'BUSY'
}
/**
 * This client's principal may not use `key` (for `acquireAll`, the first
 * key it may not use); nothing was granted. Final, never retried: the
 * server's configuration decides which key prefixes a principal may use.
 */
export declare class ForbiddenError extends TicketingError {
  /** Always `'FORBIDDEN'`. */
  readonly code: 'FORBIDDEN'
  /** The key the principal may not use. */
  readonly key: string
}
/**
 * Possibly sent, no definite answer: do NOT enter the critical section. The client
 * releases such a grant within 5 s (else it ends with its lease).
 */
export declare class IndeterminateError extends TicketingError {
  /** Always `'INDETERMINATE'`. */
  readonly code: 'INDETERMINATE'
}
/** Granted with less than `budget` left; the client released the grant. */
export declare class InsufficientTimeError extends TicketingError {
  /** Always `'INSUFFICIENT_TIME'`. */
  readonly code: 'INSUFFICIENT_TIME'
}
/** No ready connection within `wait`; nothing was sent. */
export declare class UnavailableError extends TicketingError {
  /** Always `'UNAVAILABLE'`. */
  readonly code: 'UNAVAILABLE'
}
/** No final answer to a release within 5 s (or the release lane was full). */
export declare class ReleaseUnconfirmedError extends TicketingError {
  /** Always `'RELEASE_UNCONFIRMED'`. */
  readonly code: 'RELEASE_UNCONFIRMED'
}
/** The broker is closed. */
export declare class ClosedError extends TicketingError {
  /** Always `'CLOSED'`. */
  readonly code: 'CLOSED'
}
/** The server refused the token, or could not prove it knows it. */
export declare class AuthFailedError extends TicketingError {
  /** Always `'AUTH_FAILED'`. */
  readonly code: 'AUTH_FAILED'
}
/** The scoped forms only (`withLock`, `withSharedLock`, …): not granted within `wait` (the server answered `T`). */
export declare class LockTimeoutError extends TicketingError {
  /** Always `'LOCK_TIMEOUT'`. */
  readonly code: 'LOCK_TIMEOUT'
}
/** The `reason` of `ticket.signal`. Not a TicketingError. */
export declare class TicketExpiredError extends Error {
  /** Always `'TICKET_EXPIRED'`. */
  readonly code: 'TICKET_EXPIRED'
}

/** The package version. */
export declare const version: string
