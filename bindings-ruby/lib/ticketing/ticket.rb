# frozen_string_literal: true

module Ticketing
  # A granted lock, returned by {TicketBroker#acquire} (and
  # +acquire_shared+, +acquire_all+) and yielded by {TicketBroker#with_lock}
  # and the other scoped forms. Created only by the library.
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
  #   @return [String] the key this ticket holds (the first of a multi-key grant)
  #
  # @!method keys
  #   Every key this ticket holds, in the order asked for: one, or all of a
  #   {TicketBroker#acquire_all} grant (which has one token for all of them).
  #   @return [Array<String>] frozen
  #
  # @!method slot
  #   The permit index of a counted grant ({TicketBroker#acquire_shared},
  #   {TicketBroker#with_read_lock}): the lowest index in 0...n that no other
  #   holder of the key had when it was granted, so a resource can be fenced
  #   per (key, slot).
  #   @return [Integer, nil] nil for an exclusive grant
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
  #   Releases exactly this grant (every key of a multi-key grant). Blocks with the GVL released (interruptible).
  #   A second call returns the first definite result.
  #   @return [Boolean] true when released, false when this ticket no longer
  #     held the lock (expired, or released before; for several keys: any of them)
  #   @raise [ReleaseUnconfirmedError] no final answer within 5 s
  #   @raise [ForbiddenError] this token may no longer use the key (final; the lock returns at lease end)
  #   @raise [ClosedError] the ticket belongs to the parent of a forked process
  class Ticket
    # @return [String]
    def inspect
      what = keys.length == 1 ? format("key=%p", key) : format("keys=%p", keys)
      where = slot.nil? ? "" : " slot=#{slot}"
      format("#<Ticketing::Ticket %s token=%d%s remaining=%.3f>", what, token, where, remaining)
    end
    alias to_s inspect
  end
end
