// A tour of the API, type-checked with `tsc --strict --noEmit` by the tests
// (bindings-node/run-tests.sh) and run against a server:
//   node example.js 127.0.0.1:5225   (after compiling), or see example.mjs.
import { IndeterminateError, LockTimeoutError, Ticket, TicketBroker, TicketingError } from 'ticketing'

export async function main(addr: string): Promise<bigint> {
  await using broker = await TicketBroker.connect(addr)
  const ready: boolean = await broker.waitReady(5)
  if (!ready) throw new Error(`no server at ${addr}`)

  // Scoped: released afterwards, also when the callback throws.
  const token: bigint = await broker.withLock('seat:42', { wait: 5, lease: 30, budget: 2 }, async (ticket) => {
    // In ONE database transaction, fence by the token, then write:
    //   UPDATE fence SET high_water = $token WHERE key = $key AND high_water < $token
    // and pass ticket.signal to anything that must stop at the deadline.
    const left: number = ticket.remaining()
    return left > 0 ? ticket.token : 0n
  })

  // The budget may be left out (0), also before the options.
  const quick: Ticket | null = await broker.acquire('seat:44', 0, 5, { signal: AbortSignal.timeout(5000) })
  await quick?.release()

  // Plain acquire with a cancel: a Ticket, or null when not granted in time.
  const controller = new AbortController()
  const timer = setTimeout(() => controller.abort(), 10_000)
  try {
    const ticket: Ticket | null = await broker.acquire('seat:43', 5, 30, 2, { signal: controller.signal })
    if (ticket !== null) {
      await using held = ticket // released at the end of this block
      console.log(held.key, held.token, held.signal.aborted)
    }
  } catch (err) {
    if (err instanceof IndeterminateError) {
      console.log('may have been granted: not entering; the client releases it within 5 s')
    } else if (err instanceof TicketingError) {
      console.log('ticketing error', err.code)
    } else {
      throw err
    }
  } finally {
    clearTimeout(timer)
  }

  try {
    await broker.withLock('seat:42', { wait: 0, lease: 1 }, () => 'unused')
  } catch (err) {
    if (!(err instanceof LockTimeoutError)) throw err
  }

  // A semaphore of 2 permits on one key; the slot (0 or 1) names the
  // resource to fence, per (key, slot).
  const slot: number | null = await broker.withSharedLock('pool:db', 2, { wait: 5, lease: 30 }, (t) => t.slot)
  console.log('slot', slot)

  // Several keys at once, atomically, with ONE token for all of them.
  const both: Ticket | null = await broker.acquireAll(['seat:45', 'seat:46'], 5, 30, { signal: AbortSignal.timeout(10_000) })
  if (both !== null) {
    await using held = both // releases every key at the end of this block
    const keys: readonly string[] = held.keys
    console.log(keys.join('+'), held.token)
  }
  await broker.withAllLocks(['seat:45', 'seat:46'], { wait: 5, lease: 30 }, async () => {})

  // A read/write lock: readers share the key, a writer holds it alone.
  const left: number = await broker.withReadLock('doc:1', { wait: 5, lease: 30 }, (t) => t.remaining())
  await broker.withWriteLock('doc:1', { wait: 5, lease: 30, budget: 1 }, async (t) => {
    if (t.slot !== null || left <= 0) throw new Error('a write lock is exclusive')
  })
  const permit: Ticket | null = await broker.acquireShared('pool:db', 2, 0, 30)
  await permit?.release()

  // Several addresses (a cluster), a token and TLS:
  const cluster = new TicketBroker(['10.0.0.1:5225', '10.0.0.2:5225', '10.0.0.3:5225'], { token: 's3cret', tls: 'system-roots' })
  await cluster.close()
  return token
}
