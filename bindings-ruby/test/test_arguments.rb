# frozen_string_literal: true

require_relative "helper"

# Bad arguments raise ArgumentError (TypeError for a wrong type) before
# anything is sent: against an address where nothing listens, a bad
# argument is reported instead of UnavailableError. Fractions round up;
# nothing is clamped.
class TestArguments < Minitest::Test
  include SharedServer

  def dead
    @dead ||= Ticketing::TicketBroker.new(["127.0.0.1:#{TestHelper.free_port}"])
  end

  def teardown
    @dead&.close
    super
  end

  def assert_arg_error(wait, lease, budget, key: "k", klass: ArgumentError)
    assert_raises(klass, "acquire(#{key.inspect}, #{wait.inspect}, #{lease.inspect}, #{budget.inspect})") do
      dead.acquire(key, wait, lease, budget)
    end
  end

  def test_wait_out_of_range
    assert_arg_error(256, 10, 0)
    assert_arg_error(255.5, 10, 0) # rounds up to 256: refused, not clamped
    assert_arg_error(-1, 10, 0)
    assert_arg_error(-0.5, 10, 0)
    assert_arg_error(Float::NAN, 10, 0)
    assert_arg_error(Float::INFINITY, 10, 0)
    assert_arg_error(2**80, 10, 0)
  end

  def test_lease_out_of_range
    assert_arg_error(0, 0, 0)
    assert_arg_error(0, 251, 0)
    assert_arg_error(0, 250.1, 0) # rounds up to 251
    assert_arg_error(0, -1, 0)
    assert_arg_error(0, Float::NAN, 0)
  end

  def test_budget_out_of_range
    assert_arg_error(0, 5, 6)
    assert_arg_error(0, 5, 5.5) # rounds up to 6 > lease 5
    assert_arg_error(0, 5, -1)
    assert_arg_error(0, 5, Float::NAN)
    assert_arg_error(0, 250, 251)
  end

  def test_bad_keys
    ["", "a b", "tab\tkey", "x" * 251, "ключ", "line\n"].each do |key|
      assert_arg_error(0, 10, 0, key: key)
    end
    assert_arg_error(0, 10, 0, key: "\xff".b)
  end

  def test_wrong_types
    assert_arg_error("5", 10, 0, klass: TypeError)
    assert_arg_error(nil, 10, 0, klass: TypeError)
    assert_arg_error(0, "10", 0, klass: TypeError)
    assert_arg_error(0, 10, nil, klass: TypeError)
    assert_arg_error(0, 10, 0, key: :sym, klass: TypeError)
    assert_arg_error(0, 10, 0, key: nil, klass: TypeError)
    # The lease is required; the budget defaults to 0 (test_api.rb).
    assert_raises(ArgumentError) { dead.acquire("k", 1) }
  end

  def test_constructor_and_wait_ready_arguments
    assert_raises(ArgumentError) { Ticketing::TicketBroker.new([]) }
    assert_raises(ArgumentError) { Ticketing::TicketBroker.new(["no-port"]) }
    assert_raises(ArgumentError) { Ticketing::TicketBroker.connect("no-port") }
    assert_raises(ArgumentError) { Ticketing::TicketBroker.new([server.addr], tls: "") }
    assert_raises(ArgumentError) { Ticketing::TicketBroker.new([server.addr], tls: "/nonexistent/ca.pem") }
    assert_raises(TypeError) { Ticketing::TicketBroker.new(42) }
    assert_raises(TypeError) { Ticketing::TicketBroker.new([server.addr], token: 123) }
    assert_raises(ArgumentError) { Ticketing::TicketBroker.new([server.addr], bogus: 1) }
    assert_raises(ArgumentError) { dead.wait_ready(-1) }
    assert_raises(ArgumentError) { dead.wait_ready(Float::NAN) }
    assert_raises(TypeError) { dead.wait_ready("1") }
  end

  def test_with_lock_arguments
    assert_raises(ArgumentError) { dead.with_lock("k", wait: 0, lease: 10, budget: 0) }
    assert_raises(ArgumentError) { dead.with_lock("k", wait: 0) { nil } }
    assert_raises(ArgumentError) { dead.with_lock("k", wait: 256, lease: 10, budget: 0) { nil } }
  end

  def test_counted_arguments
    [0, 65_536, -1, 2**80].each do |n|
      assert_raises(ArgumentError, "n=#{n}") { dead.acquire_shared("k", n, 0, 10) }
      assert_raises(ArgumentError, "n=#{n}") { dead.with_shared_lock("k", n, wait: 0, lease: 10) { flunk "entered" } }
    end
    [2.0, "2", nil, :two].each do |n|
      assert_raises(TypeError, "n=#{n.inspect}") { dead.acquire_shared("k", n, 0, 10) }
    end
    assert_raises(ArgumentError) { dead.acquire_shared("a b", 2, 0, 10) }
    assert_raises(ArgumentError) { dead.acquire_shared("k", 2, 0, 0) }
    assert_raises(TypeError) { dead.acquire_shared(:k, 2, 0, 10) }
    assert_raises(ArgumentError) { dead.with_shared_lock("k", 2, wait: 0, lease: 10) }
  end

  def test_multi_key_arguments
    too_long = Array.new(3) { |i| ("x" * 249) + i.to_s } # each key is fine, the request is over 512 bytes
    [[], ["a"], %w[a a], Array.new(17) { |i| "k#{i}" }, ["a b", "c"], too_long].each do |keys|
      assert_raises(ArgumentError, keys.inspect) { dead.acquire_all(keys, 0, 10) }
      assert_raises(ArgumentError, keys.inspect) { dead.with_all_locks(keys, wait: 0, lease: 10) { flunk "entered" } }
    end
    assert_raises(ArgumentError) { dead.acquire_all(%w[a b], 256, 10) }
    ["ab", nil, ["a", :b], ["a", 1], { "a" => 1 }].each do |keys|
      assert_raises(TypeError, keys.inspect) { dead.acquire_all(keys, 0, 10) }
    end
    assert_raises(ArgumentError) { dead.with_all_locks(%w[a b], wait: 0, lease: 10) }
  end

  def test_read_write_lock_arguments
    %i[with_read_lock with_write_lock].each do |m|
      assert_raises(ArgumentError, m) { dead.public_send(m, "a b", wait: 0, lease: 10) { flunk "entered" } }
      assert_raises(ArgumentError, m) { dead.public_send(m, "k", wait: 0, lease: 10, budget: 11) { flunk "entered" } }
      assert_raises(TypeError, m) { dead.public_send(m, "k", wait: "0", lease: 10) { flunk "entered" } }
      assert_raises(ArgumentError, m) { dead.public_send(m, "k", wait: 0, lease: 10) }
      assert_raises(ArgumentError, m) { dead.public_send(m, "k", wait: 0) { flunk "entered" } }
    end
  end

  def test_fractions_round_up
    key = TestHelper.unique_key
    # lease 1.5 -> 2, budget 0.2 -> 1: granted (with a lease of 1 s, a
    # budget of 1 s would be InsufficientTimeError).
    t = broker.acquire(key, 0.2, 1.5, 0.2)
    refute_nil t
    assert_operator t.remaining, :<=, 2.0
    # wait 0.2 -> 1 s in the queue, not an immediate attempt.
    t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    assert_nil broker.acquire(key, 0.2, 10, 0)
    assert_operator Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0, :>=, 0.9
    t.release
    r = broker.acquire(key, 0, Rational(1, 3), 0) # any Numeric: 1/3 -> 1
    refute_nil r
    r.release
  end
end
