// The ES module entry of the installed package: named and default exports.
import ticketing, { TicketBroker, TicketingError, version } from 'ticketing'

if (ticketing.TicketBroker !== TicketBroker) throw new Error('default export: not the same module object')
if (typeof TicketingError !== 'function') throw new Error('TicketingError is not exported')
console.log(`esm: ticketing ${version}`)
