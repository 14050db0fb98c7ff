// ES module entry: the same objects as the CommonJS entry (index.js), so
// `import { TicketBroker } from "ticketing"` and `require("ticketing")`
// share one module instance and one set of error classes.
import cjs from './index.js'

export const {
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
  version,
} = cjs
export default cjs
