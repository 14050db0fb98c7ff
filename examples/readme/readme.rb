require "ticketing"

# TICKETING_ADDR: one address, or every node of a cluster separated by commas
broker = Ticketing::TicketBroker.new(ENV.fetch("TICKETING_ADDR", "127.0.0.1:5225").split(","))
broker.wait_ready(5) # until a request can go to the leader (at most 5 s)
ticket = broker.acquire("seat-17", 5, 30, 2) # a Ticket, or nil when not granted within 5 s
if ticket
  begin
    # in ONE database transaction: the fence with ticket.token, then the write
    puts "holding #{ticket.key} with token #{ticket.token}"
  ensure
    ticket.release
  end
end
broker.close
