// Runnable: node examples/example.mjs 127.0.0.1:5225
import { TicketBroker, LockTimeoutError } from 'ticketing'

const broker = await TicketBroker.connect(process.argv[2] ?? '127.0.0.1:5225')
try {
  const value = await broker.withLock('seat:42', { wait: 5, lease: 30, budget: 2 }, async (ticket) => {
    // fence your database write with ticket.token (a bigint)
    return `${ticket.key} token ${ticket.token}`
  })
  console.log(value)
} catch (err) {
  if (err instanceof LockTimeoutError) console.log('not granted within 5 s')
  else throw err
} finally {
  await broker.close()
}
