// The Ruby example of the README, in Node (CommonJS; the consumer test runs
// it against a server from the release tarball, the address substituted).
'use strict'
const { TicketBroker } = require('ticketing')

async function main() {
  const broker = await TicketBroker.connect('127.0.0.1:5225')
  await broker.waitReady(5)

  const ticket = await broker.acquire('key', 5, 30, 2)
  if (ticket === null) throw new Error('not granted within 5 s')
  try {
    const token = ticket.token
    // In the same DB transaction: verify/update token high-water and perform the business write.
    console.log(`node: granted ${ticket.key} token ${token}`)
  } finally {
    if (!(await ticket.release())) throw new Error('release: the ticket had expired')
  }
  await broker.close()
}

main().catch((e) => {
  console.error(e)
  process.exit(1)
})
