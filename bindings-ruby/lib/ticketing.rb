# frozen_string_literal: true

# Ticketing: a distributed FIFO lock service with fencing tokens. This gem
# is a thin layer over the one Rust client (+ticketing-client+): every rule
# of the client behaviour lives there; Ruby converts types, blocks with the
# GVL released, and maps errors to {Ticketing::Error} subclasses.
#
# @example
#   require "ticketing"
#
#   broker = Ticketing::TicketBroker.connect("127.0.0.1:5225")
#   broker.wait_ready(5)
#   broker.with_lock("seat-42", wait: 5, lease: 30, budget: 2) do |ticket|
#     # in ONE DB transaction: refuse token <= high-water, update it, write
#     ticket.token
#   end
module Ticketing
end

require_relative "ticketing/version"
require_relative "ticketing/errors"
# The native extension (defines the native methods): in the platform gem,
# the one compiled for this Ruby's ABI (lib/ticketing/<major.minor>/); in the
# source gem, the one compiled at install (ticketing/ticketing).
abi_ext = File.join(__dir__, "ticketing", RUBY_VERSION[/\A\d+\.\d+/], "ticketing")
if Dir.glob("#{abi_ext}.{so,bundle}").empty?
  require "ticketing/ticketing"
else
  # The ABI-specific file is there: if it does not load, that is the error to see.
  require abi_ext
end
require_relative "ticketing/ticket"
require_relative "ticketing/ticket_broker"
