# frozen_string_literal: true

module Ticketing
  # A granted lock on one key, returned by {TicketBroker#acquire} and
  # yielded by {TicketBroker#with_lock}. Created only by the library.
  #
  # A ticket that is garbage-collected without {#release} is released
  # best-effort in the background (the result is only logged); so is every
  # live ticket when its broker is closed. If the result matters, call
  # {#release}. Tickets stay with the process that acquired them: in a
  # forked child, {#release} raises {ClosedError}.
  #
  # @!method token
  #   The fencing token of this grant, strictly increasing over all grants.
  #   In the same DB transaction as the protected write: refuse
  #   +token <= stored_high_water+, store the token, write.
  #   @return [Integer] 1 <= token < 2**63
  #
  # @!method key
  #   @return [String] the key this ticket holds
  #
  # @!method remaining
  #   Seconds left until the conservative deadline of the lease (send time +
  #   time waited + lease x 0.999); work running after it is protected only
  #   by the database fence.
  #   @return [Float] never negative
  #
  # @!method expired?
  #   @return [Boolean] true once {#remaining} is 0
  #
  # @!method release
  #   Releases exactly this grant. Blocks with the GVL released (interruptible).
  #   A second call returns the first definite result.
  #   @return [Boolean] true when released, false when this ticket no longer
  #     held the lock (expired, or released before)
  #   @raise [ReleaseUnconfirmedError] no final answer within 5 s
  #   @raise [ClosedError] the ticket belongs to the parent of a forked process
  class Ticket
    # @return [String]
    def inspect
      format("#<Ticketing::Ticket key=%p token=%d remaining=%.3f>", key, token, remaining)
    end
    alias to_s inspect
  end
end
