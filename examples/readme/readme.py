import os

import ticketing

# TICKETING_ADDR: one address, or every node of a cluster separated by commas
addrs = os.environ.get("TICKETING_ADDR", "127.0.0.1:5225").split(",")
with ticketing.TicketBroker(addrs) as broker:
    broker.wait_ready(5)  # until a request can go to the leader (at most 5 s)
    # wait 5 s in the queue, lease 30 s, need 2 s of work time; LockTimeout if not granted
    with broker.lock("seat-17", wait=5, lease=30, budget=2) as ticket:
        # in ONE database transaction: the fence with ticket.token, then the write
        print(f"holding {ticket.key} with token {ticket.token}")
