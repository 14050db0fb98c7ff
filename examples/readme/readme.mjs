import { TicketBroker, LockTimeoutError } from 'ticketing'

// TICKETING_ADDR: one address, or every node of a cluster separated by commas
const broker = new TicketBroker((process.env.TICKETING_ADDR ?? '127.0.0.1:5225').split(','))
try {
  await broker.waitReady(5) // until a request can go to the leader (at most 5 s)
  await broker.withLock('seat-17', { wait: 5, lease: 30, budget: 2 }, async (ticket) => {
    // in ONE database transaction: the fence with ticket.token (a bigint), then the write
    console.log(`holding ${ticket.key} with token ${ticket.token}`)
  })
} catch (err) {
  if (err instanceof LockTimeoutError) console.log('not granted within 5 s')
  else throw err
} finally {
  await broker.close()
}
