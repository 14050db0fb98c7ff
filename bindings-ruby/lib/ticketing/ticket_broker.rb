# frozen_string_literal: true

module Ticketing
  # A connection pool and router to a Ticketing server or 3/5-node cluster.
  # Create one at application start and share it: it is safe to use from
  # many threads at once (Puma), and after +fork+ (Puma/Unicorn preload) a
  # child that uses it starts afresh with its own connections.
  #
  # Durations are seconds (Integer, Float or Rational); fractions round
  # UP to whole seconds; +wait+ 0..255 (0 = one immediate attempt), +lease+
  # 1..250, +budget+ 0..lease. Out-of-range values raise +ArgumentError+
  # before anything is sent; nothing is clamped.
  class TicketBroker
    class << self
      # A broker for several addresses (all members of a cluster; also the
      # allowlist for leader hints). Does not wait for a connection: see
      # {#wait_ready}.
      #
      # @param addrs [Array<String>, String] +"host:port"+ addresses: an
      #   Array, or one String of one address or several separated by commas
      #   (as +TICKETING_ADDR+ holds them)
      # @param token [String, nil] the client token (the server's
      #   +client_tokens+); it never crosses the network
      # @param tls [String] +"off"+ (default), +"system-roots"+, a path to a
      #   CA file (PEM), or +"insecure-skip-verify"+ (tests only)
      # @param tls_client_cert [String, nil] a client certificate (PEM file)
      #   for a server that requires one (+--tls-client-ca+); with
      #   +tls_client_key+ and a TLS mode
      # @param tls_client_key [String, nil] the private key (PEM file) of
      #   +tls_client_cert+
      # @return [TicketBroker]
      # @raise [ArgumentError] no address, a bad address or TLS option, an
      #   unreadable client certificate or key, or only one of them
      # @raise [TypeError] a non-String address, token, tls or client
      #   certificate path
      def new(addrs, token: nil, tls: "off", tls_client_cert: nil, tls_client_key: nil)
        list = addr_list(addrs)
        raise TypeError, "token must be a String or nil" unless token.nil? || token.is_a?(String)
        raise TypeError, "tls must be a String" unless tls.is_a?(String)

        tls_client_cert = tls_client_cert.to_path if tls_client_cert.respond_to?(:to_path)
        tls_client_key = tls_client_key.to_path if tls_client_key.respond_to?(:to_path)
        { tls_client_cert: tls_client_cert, tls_client_key: tls_client_key }.each do |name, v|
          raise TypeError, "#{name} must be a String path or nil" unless v.nil? || v.is_a?(String)
        end

        named(_build(list, token, tls, tls_client_cert, tls_client_key))
      end

      # A broker for one address, or several (an Array, or one String with
      # the addresses separated by commas, as +TICKETING_ADDR+ holds them;
      # the library opens two connections to each).
      # Returns as soon as a request could be routed, or once the first
      # connection attempts have settled (at most the 5 s handshake limit);
      # a server that is down does not make it fail: the broker keeps
      # reconnecting.
      #
      # @param addrs [String, Array<String>] +"host:port"+, or several
      # @return [TicketBroker]
      # @raise [ArgumentError] no address or a bad address
      # @raise [TypeError] a non-String address
      def connect(addrs)
        named(_connect(addr_list(addrs)))
      end

      private :_build, :_connect

      private

      # The addresses as given (a String or an Array of Strings); the
      # library splits each at its commas.
      def addr_list(addrs)
        list = addrs.is_a?(String) ? [addrs] : addrs
        raise TypeError, "addrs must be a \"host:port\" String or an Array of them, not #{addrs.class}" unless list.is_a?(Array)

        list.each do |a|
          raise TypeError, "every address must be a String, not #{a.class}" unless a.is_a?(String)
        end
        list
      end

      # The broker with its addresses as the library took them apart.
      def named(broker)
        broker.instance_variable_set(:@addrs, broker.send(:_addrs).map(&:freeze).freeze)
        broker
      end
    end

    # @return [Array<String>] the configured addresses
    attr_reader :addrs

    # Waits until a request can be routed (a ready leader connection).
    # Blocks with the GVL released (interruptible).
    #
    # @param seconds [Integer, Float, Rational] the most to wait
    # @return [Boolean] true when ready, false on timeout or when closed
    # @raise [ArgumentError] a negative or non-finite +seconds+
    def wait_ready(seconds)
      _wait_ready(seconds)
    end

    # Acquires +key+: waits up to +wait+ seconds in the server's FIFO queue.
    # Blocks with the GVL released; +Thread#raise+, +Timeout.timeout+ and
    # Ctrl-C cancel it (not yet sent: nothing happens; possibly sent: the
    # library closes that connection, and releases a grant that still
    # arrives), and the exception propagates once the cancel was taken.
    #
    # @param key [String] 1..250 visible ASCII bytes, no space
    # @param wait [Integer, Float, Rational] 0..255 s in the queue (0 = one immediate attempt);
    #   also the budget for finding a connection
    # @param lease [Integer, Float, Rational] 1..250 s, the lock's lifetime
    # @param budget [Integer, Float, Rational] 0..lease s (default 0): the least work time the ticket
    #   must leave, or {InsufficientTimeError}
    # @return [Ticket, nil] a Ticket, or nil when not granted within +wait+
    # @raise [ArgumentError] a bad key or duration (nothing was sent)
    # @raise [BusyError] refused for capacity (final, not retried)
    # @raise [ForbiddenError] this token may not use +key+ (final, not retried; +#key+ names it)
    # @raise [IndeterminateError] possibly granted: do NOT enter
    # @raise [InsufficientTimeError] granted with less than +budget+ left
    # @raise [UnavailableError] no connection within +wait+ (nothing sent)
    # @raise [AuthFailedError] the token was refused
    # @raise [ClosedError] the broker is closed
    def acquire(key, wait, lease, budget = 0)
      _acquire(key, wait, lease, budget)
    end

    # Acquires one of +n+ counted permits of +key+ (a semaphore of +n+):
    # granted while fewer than +n+ counted holders hold +key+ and no
    # exclusive holder does, in FIFO order with every other request on the
    # key. Each grant has its own token; {Ticket#slot} is its permit index
    # in 0...n (the lowest free one), so a resource can be fenced per
    # (key, slot). Blocking and cancellation as {#acquire}.
    #
    # @param key [String] see {#acquire}
    # @param n [Integer] 1..65535 permits
    # @param wait [Integer, Float, Rational] see {#acquire}
    # @param lease [Integer, Float, Rational] see {#acquire}
    # @param budget [Integer, Float, Rational] see {#acquire}
    # @return [Ticket, nil] a Ticket, or nil when not granted within +wait+
    # @raise [ArgumentError] +n+ out of range, a bad key or duration (nothing was sent)
    # @raise [TypeError] a non-Integer +n+
    # @raise [Error] the errors of {#acquire}
    def acquire_shared(key, n, wait, lease, budget = 0)
      _acquire_shared(key, n, wait, lease, budget)
    end

    # Acquires every key of +keys+ exclusively and atomically: ONE ticket
    # with one token for all of them ({Ticket#keys}), granted when the
    # request is first in the queue of every key and all are free; no
    # deadlock, whatever the key order. {Ticket#release} frees every key.
    # Blocking and cancellation as {#acquire}.
    #
    # @param keys [Array<String>] 2..16 distinct keys
    # @param wait [Integer, Float, Rational] see {#acquire}
    # @param lease [Integer, Float, Rational] see {#acquire}
    # @param budget [Integer, Float, Rational] see {#acquire}
    # @return [Ticket, nil] a Ticket, or nil when not granted within +wait+
    # @raise [ArgumentError] fewer than 2 or more than 16 keys, a key twice,
    #   keys too long together for one request, a bad key or duration
    #   (nothing was sent)
    # @raise [TypeError] +keys+ not an Array of Strings
    # @raise [Error] the errors of {#acquire}
    def acquire_all(keys, wait, lease, budget = 0)
      _acquire_all(keys, wait, lease, budget)
    end

    # The scoped form of {#acquire}: acquires, yields the {Ticket},
    # releases it in +ensure+, and returns the block's value.
    #
    # If the block raised, that exception propagates even when the release
    # fails. If the block completed and the release raises (e.g.
    # {ReleaseUnconfirmedError}), that error propagates. A release answered
    # "not the holder" (the lease ran out during the block) is not an error:
    # check {Ticket#expired?} and rely on the fencing token.
    #
    # @param key [String]
    # @param wait [Integer, Float, Rational] see {#acquire}
    # @param lease [Integer, Float, Rational] see {#acquire}
    # @param budget [Integer, Float, Rational] see {#acquire}
    # @yieldparam ticket [Ticket]
    # @return [Object] the block's value
    # @raise [LockTimeoutError] not granted within +wait+
    # @raise [ArgumentError] no block, or see {#acquire}
    def with_lock(key, wait:, lease:, budget: 0, &block)
      raise ArgumentError, "with_lock needs a block" unless block

      scoped(acquire(key, wait, lease, budget), "lock timeout: #{key} was not granted within #{wait} s", &block)
    end

    # The scoped form of {#acquire_shared}: acquires one of +n+ permits,
    # yields the {Ticket} (its {Ticket#slot}), releases it in +ensure+, and
    # returns the block's value; the exception rules of {#with_lock}.
    #
    # @param key [String]
    # @param n [Integer] 1..65535 permits
    # @yieldparam ticket [Ticket]
    # @return [Object] the block's value
    # @raise [LockTimeoutError] not granted within +wait+
    # @raise [ArgumentError] no block, or see {#acquire_shared}
    def with_shared_lock(key, n, wait:, lease:, budget: 0, &block)
      raise ArgumentError, "with_shared_lock needs a block" unless block

      scoped(acquire_shared(key, n, wait, lease, budget),
             "lock timeout: #{key} (n=#{n}) was not granted within #{wait} s", &block)
    end

    # The scoped form of {#acquire_all}: acquires every key, yields the
    # {Ticket}, releases every key in +ensure+, and returns the block's
    # value; the exception rules of {#with_lock}.
    #
    # @param keys [Array<String>] 2..16 distinct keys
    # @yieldparam ticket [Ticket]
    # @return [Object] the block's value
    # @raise [LockTimeoutError] not granted within +wait+
    # @raise [ArgumentError] no block, or see {#acquire_all}
    def with_all_locks(keys, wait:, lease:, budget: 0, &block)
      raise ArgumentError, "with_all_locks needs a block" unless block

      scoped(acquire_all(keys, wait, lease, budget),
             "lock timeout: #{keys.inspect} were not granted within #{wait} s", &block)
    end

    # The shared (read) side of the read/write lock +key+, scoped: any
    # number of readers hold +key+ together; a writer ({#with_write_lock})
    # holds it alone, and readers that arrive after a waiting writer queue
    # behind it (writers do not starve). The exception rules of
    # {#with_lock}.
    #
    # @param key [String]
    # @yieldparam ticket [Ticket]
    # @return [Object] the block's value
    # @raise [LockTimeoutError] not granted within +wait+
    # @raise [ArgumentError] no block, or see {#acquire}
    def with_read_lock(key, wait:, lease:, budget: 0, &block)
      raise ArgumentError, "with_read_lock needs a block" unless block

      scoped(_read_lock(key, wait, lease, budget),
             "lock timeout: read lock #{key} was not granted within #{wait} s", &block)
    end

    # The exclusive (write) side of the read/write lock +key+, scoped (see
    # {#with_read_lock}); the same grant as {#with_lock}.
    #
    # @param key [String]
    # @yieldparam ticket [Ticket]
    # @return [Object] the block's value
    # @raise [LockTimeoutError] not granted within +wait+
    # @raise [ArgumentError] no block, or see {#acquire}
    def with_write_lock(key, wait:, lease:, budget: 0, &block)
      raise ArgumentError, "with_write_lock needs a block" unless block

      scoped(_write_lock(key, wait, lease, budget),
             "lock timeout: write lock #{key} was not granted within #{wait} s", &block)
    end

    # Closes the broker: waiting acquires fail with {ClosedError}, live
    # tickets are released best-effort (at most 5 s), then the connections
    # close. Later calls raise {ClosedError} ({#wait_ready} returns false).
    # Calling it again does nothing.
    #
    # @return [nil]
    def close
      _close
      nil
    end

    # @return [String]
    def inspect
      "#<Ticketing::TicketBroker #{(addrs || []).join(',')}>"
    end
    alias to_s inspect

    private :_addrs, :_wait_ready, :_acquire, :_acquire_shared, :_acquire_all, :_read_lock, :_write_lock, :_close

    private

    # Yields +ticket+ and releases it in +ensure+ (the rules of
    # {#with_lock}); raises {LockTimeoutError} with +timeout_message+ when
    # +ticket+ is nil.
    def scoped(ticket, timeout_message)
      raise LockTimeoutError, timeout_message if ticket.nil?

      completed = false
      begin
        value = yield ticket
        completed = true
        value
      ensure
        if completed
          ticket.release
        else
          begin
            ticket.release
          rescue Ticketing::Error
            # the block's exception wins; the lease end is the safety net
            nil
          end
        end
      end
    end
  end
end
