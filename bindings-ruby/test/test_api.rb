# frozen_string_literal: true

require_relative "helper"

class TestApi < Minitest::Test
  include SharedServer

  def test_ticket_attributes_and_release
    key = TestHelper.unique_key
    ticket = broker.acquire(key, 5, 30, 2)
    assert_instance_of Ticketing::Ticket, ticket
    assert_kind_of Integer, ticket.token
    assert_operator ticket.token, :>=, 1
    assert_operator ticket.token, :<, 2**63
    assert_equal key, ticket.key
    assert_kind_of Float, ticket.remaining
    assert_operator ticket.remaining, :>, 2
    assert_operator ticket.remaining, :<=, 30
    assert_equal false, ticket.expired?
    assert_match(/Ticketing::Ticket key="#{key}" token=#{ticket.token}/, ticket.inspect)
    assert_equal true, ticket.release
    assert_equal true, ticket.release, "a second call returns the first definite result"
    assert_nil server.lock_info(key)["holder"]
  end

  def test_nil_when_not_granted_within_wait
    key = TestHelper.unique_key
    holder = broker.acquire(key, 5, 30, 0)
    assert_nil broker.acquire(key, 0, 30, 0)
    assert_nil broker.acquire(key, 1, 30, 0)
    assert_equal true, holder.release
  end

  def test_tokens_increase
    key = TestHelper.unique_key
    tokens = Array.new(5) do
      t = broker.acquire(key, 5, 10, 0)
      t.release
      t.token
    end
    assert_equal tokens.sort.uniq, tokens
  end

  def test_budget_defaults_to_zero_as_in_python_and_node
    key = TestHelper.unique_key
    t = broker.acquire(key, 5, 10)
    refute_nil t
    assert_equal true, t.release
    assert_equal :done, broker.with_lock(key, wait: 5, lease: 10) { |_| :done }
    assert_nil server.lock_info(key)["holder"]
  end

  def test_with_lock_returns_the_block_value_and_releases
    key = TestHelper.unique_key
    seen = nil
    value = broker.with_lock(key, wait: 5, lease: 30, budget: 2) do |t|
      seen = t
      assert_equal key, t.key
      refute_nil server.lock_info(key)["holder"]
      :the_value
    end
    assert_equal :the_value, value
    assert_nil server.lock_info(key)["holder"]
    assert_equal true, seen.release, "already released by with_lock: the first result again"
  end

  def test_with_lock_releases_when_the_block_raises
    key = TestHelper.unique_key
    err = assert_raises(RuntimeError) do
      broker.with_lock(key, wait: 5, lease: 30, budget: 0) { raise "boom" }
    end
    assert_equal "boom", err.message
    assert_nil server.lock_info(key)["holder"]
    t = broker.acquire(key, 0, 10, 0)
    refute_nil t
    t.release
  end

  def test_with_lock_raises_lock_timeout_on_t
    key = TestHelper.unique_key
    holder = broker.acquire(key, 5, 30, 0)
    ran = false
    err = assert_raises(Ticketing::LockTimeoutError) do
      broker.with_lock(key, wait: 0, lease: 30, budget: 0) { ran = true }
    end
    refute ran
    assert_kind_of Ticketing::Error, err
    assert_equal :lock_timeout, err.code
    holder.release
  end

  def test_insufficient_time
    key = TestHelper.unique_key
    # lease 1 s: the conservative deadline (lease x 0.999 minus the round
    # trip) is below a budget of 1 s.
    err = assert_raises(Ticketing::InsufficientTimeError) { broker.acquire(key, 5, 1, 1) }
    assert_equal :insufficient_time, err.code
    # The grant was handed back: the key is free again soon.
    t = broker.acquire(key, 10, 10, 0)
    refute_nil t
    t.release
  end

  def test_connect_takes_one_comma_separated_string_or_an_array
    dead = "127.0.0.1:#{TestHelper.free_port}"
    ["#{dead}, #{server.addr}", [dead, server.addr]].each do |addrs|
      b = Ticketing::TicketBroker.connect(addrs)
      assert_equal [dead, server.addr], b.addrs
      assert b.wait_ready(5)
      t = b.acquire(TestHelper.unique_key, 5, 10, 0)
      refute_nil t
      assert t.release
    ensure
      b&.close
    end
    assert_raises(TypeError) { Ticketing::TicketBroker.connect([dead, 5]) }
  end

  def test_close
    b = Ticketing::TicketBroker.connect(server.addr)
    key = TestHelper.unique_key
    live = b.acquire(key, 5, 60, 0)
    refute_nil live
    assert_nil b.close
    assert_nil b.close, "close is idempotent"
    assert_raises(Ticketing::ClosedError) { b.acquire(key, 0, 10, 0) }
    assert_equal false, b.wait_ready(0.1)
    # close released the live ticket best-effort
    assert TestHelper.wait_until(10) { server.lock_info(key)["holder"].nil? }
  end

  def test_unavailable_and_wait_ready_false
    dead = "127.0.0.1:#{TestHelper.free_port}"
    b = Ticketing::TicketBroker.new([dead])
    assert_equal false, b.wait_ready(0.5)
    err = assert_raises(Ticketing::UnavailableError) { b.acquire(TestHelper.unique_key, 0, 10, 0) }
    assert_equal :unavailable, err.code
    assert_match(/nothing was sent/, err.message)
  ensure
    b&.close
  end

  def test_new_with_keywords_and_inspect
    b = Ticketing::TicketBroker.new([server.addr], token: nil, tls: "off")
    assert b.wait_ready(10)
    assert_equal [server.addr], b.addrs
    assert_equal "#<Ticketing::TicketBroker #{server.addr}>", b.inspect
    t = b.acquire(TestHelper.unique_key, 5, 10, 0)
    assert_equal true, t.release
  ensure
    b&.close
  end

  def test_no_public_allocation
    assert_raises(TypeError, NoMethodError) { Ticketing::Ticket.new }
    assert_raises(NoMethodError) { Ticketing::TicketBroker._build([server.addr], nil, "off") }
  end

  def test_error_tree
    classes = [Ticketing::BusyError, Ticketing::ForbiddenError, Ticketing::IndeterminateError,
               Ticketing::InsufficientTimeError, Ticketing::UnavailableError, Ticketing::ReleaseUnconfirmedError,
               Ticketing::ClosedError, Ticketing::AuthFailedError, Ticketing::LockTimeoutError]
    assert_operator Ticketing::Error, :<, StandardError
    classes.each do |c|
      assert_operator c, :<, Ticketing::Error
      refute_empty c.new.message
      refute_nil c.new.code
    end
    assert_equal classes.size, classes.map { |c| c.new.code }.uniq.size
  end
end

# B: the server's queue for the key is full.
class TestBusy < Minitest::Test
  include SharedServer

  def self.server_args
    ["--max-waiters-per-key", "1"]
  end

  def test_busy_on_a_full_queue
    key = TestHelper.unique_key
    holder = broker.acquire(key, 5, 60, 0)
    waiter = Thread.new { broker.acquire(key, 60, 10, 0) }
    assert TestHelper.wait_until(20) { server.waiters(key) == 1 }, "the first waiter never queued"
    err = assert_raises(Ticketing::BusyError) { broker.acquire(key, 30, 10, 0) }
    assert_equal :busy, err.code
    assert_equal true, holder.release
    granted = waiter.join(30)&.value
    refute_nil granted, "the queued waiter was not granted"
    assert_operator granted.token, :>, holder.token
    granted.release
  end
end

# A server with client tokens: the right token works, a wrong one is AuthFailed.
class TestAuth < Minitest::Test
  def setup
    @server = TestServer.new(env: { "TICKETING_CLIENT_TOKENS" => "ruby-secret" })
  end

  def teardown
    @server.stop
  end

  def test_token
    good = Ticketing::TicketBroker.new(@server.addr, token: "ruby-secret")
    assert good.wait_ready(10)
    t = good.acquire(TestHelper.unique_key, 5, 10, 0)
    assert_equal true, t.release
    good.close

    bad = Ticketing::TicketBroker.new([@server.addr], token: "wrong")
    assert_raises(Ticketing::AuthFailedError) { bad.acquire(TestHelper.unique_key, 2, 10, 0) }
    bad.close
  end
end
