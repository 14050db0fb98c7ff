# The Ruby example of the README, in Python (the consumer test runs it
# against a server from the release tarball; the address is the one line it
# substitutes, as for the Ruby example).
import ticketing

broker = ticketing.TicketBroker.connect("127.0.0.1:5225")
broker.wait_ready(5)

ticket = broker.acquire("key", 5, 30, 2)
assert ticket is not None, "not granted within 5 s"
try:
    token = ticket.token
    # In the same DB transaction: verify/update token high-water and perform the business write.
    print(f"python: granted {ticket.key} token {token}")
finally:
    assert ticket.release()
