# frozen_string_literal: true

module Ticketing
  # Base class of every error of this library (docs/ruby.md, "Exceptions").
  # Bad arguments are not Ticketing errors: they raise +ArgumentError+ (or
  # +TypeError+ for a wrong type) before anything is sent.
  class Error < StandardError
    # @return [Symbol, nil] a stable machine-readable code (+:busy+,
    #   +:indeterminate+, ...); nil for the base class.
    def code
      self.class::CODE
    end

    # The value of {#code} for this class.
    CODE = nil
  end

  # +B+: the server refused the acquire for capacity. Final: the library
  # never retries; the caller may start a new acquire after its own backoff.
  class BusyError < Error
    # The value of {#code} for this class.
    CODE = :busy
    def initialize(msg = "busy: the server refused the acquire for capacity")
      super
    end
  end

  # +F+: this client's principal may not use {#key} (for +acquire_all+,
  # the first key it may not use); nothing was granted. Final: never retried,
  # only the server's configuration decides which key prefixes a principal
  # may use.
  class ForbiddenError < Error
    # The value of {#code} for this class.
    CODE = :forbidden
    # @return [String, nil] the key the principal may not use.
    attr_reader :key

    def initialize(msg = "forbidden: this client's principal may not use the key", key = nil)
      super(msg)
      @key = key
    end
  end

  # The acquire may have been sent and no definite answer came: the lock may
  # have been granted. Do NOT enter the critical section. The client asks the
  # leader about the acquire and releases exactly its grant within 5 s; only
  # if no leader answers within those 5 s does a grant stay until its lease
  # ends.
  class IndeterminateError < Error
    # The value of {#code} for this class.
    CODE = :indeterminate
    def initialize(msg = "indeterminate: the acquire may have been granted; do not enter the critical section")
      super
    end
  end

  # Granted, but less than the work budget was left of the conservative
  # lease; the library released the grant.
  class InsufficientTimeError < Error
    # The value of {#code} for this class.
    CODE = :insufficient_time
    def initialize(msg = "insufficient time: the grant left less than the work budget; it is being released")
      super
    end
  end

  # No ready connection within the +wait+ budget: nothing was sent,
  # definitely not acquired.
  class UnavailableError < Error
    # The value of {#code} for this class.
    CODE = :unavailable
    def initialize(msg = "unavailable: no ready connection within the budget; nothing was sent")
      super
    end
  end

  # No final answer to a release within 5 s (or the release lane was full).
  # Never an assumed success: the lease end is the last safety net.
  class ReleaseUnconfirmedError < Error
    # The value of {#code} for this class.
    CODE = :release_unconfirmed
    def initialize(msg = "release unconfirmed: no final answer within 5 s")
      super
    end
  end

  # The broker is closed (or a ticket is used in a forked child: tickets stay
  # with the process that acquired them).
  class ClosedError < Error
    # The value of {#code} for this class.
    CODE = :closed
    def initialize(msg = "closed: the broker is closed")
      super
    end
  end

  # The server refused the token, or could not prove it knows it (a possible
  # fake server). Nothing was sent.
  class AuthFailedError < Error
    # The value of {#code} for this class.
    CODE = :auth_failed
    def initialize(msg = "auth failed: the server refused the token or could not prove it knows it")
      super
    end
  end

  # Only from {TicketBroker#with_lock}: the lock was not granted within
  # +wait+ (the server answered +T+).
  class LockTimeoutError < Error
    # The value of {#code} for this class.
    CODE = :lock_timeout
    def initialize(msg = "lock timeout: not granted within the wait")
      super
    end
  end
end
