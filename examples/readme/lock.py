import ticketing
broker = ticketing.TicketBroker.connect("127.0.0.1:5225")  # the server of the first command
with broker.lock("seat-17", wait=5, lease=30) as ticket:  # queue up to 5 s, hold at most 30 s
    print(f"holding seat-17 with token {ticket.token}")  # fence your database write with it
