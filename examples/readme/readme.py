import os

import ticketing

addr = os.environ.get("TICKETING_ADDR", "127.0.0.1:5225")
with ticketing.TicketBroker.connect(addr) as broker:
    # wait 5 s in the queue, lease 30 s, need 2 s of work time; LockTimeout if not granted
    with broker.lock("seat-17", wait=5, lease=30, budget=2) as ticket:
        # in ONE database transaction: the fence with ticket.token, then the write
        print(f"holding {ticket.key} with token {ticket.token}")
