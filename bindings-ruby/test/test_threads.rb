# frozen_string_literal: true

require_relative "helper"

# One broker shared by many threads; the GVL is released while a call
# waits; Thread#raise, Timeout.timeout and Ctrl-C cancel a waiting acquire.
class TestThreads < Minitest::Test
  include SharedServer

  def test_eight_threads_are_granted_fifo_with_increasing_tokens
    key = TestHelper.unique_key
    holder = broker.acquire(key, 5, 60, 0)
    results = Queue.new
    threads = Array.new(8) do |i|
      th = Thread.new do
        t = broker.acquire(key, 60, 30, 0)
        results << [i, t&.token]
        t&.release
      end
      # Start the next one only once this one is queued at the server.
      assert TestHelper.wait_until(30) { server.waiters(key) == i + 1 }, "thread #{i} never queued"
      th
    end
    assert_equal true, holder.release
    threads.each { |th| refute_nil th.join(60), "a waiter hung" }
    order = Array.new(8) { results.pop }
    assert_equal (0..7).to_a, order.map(&:first), "granted in FIFO order"
    tokens = order.map(&:last)
    refute_includes tokens, nil
    assert_operator tokens.first, :>, holder.token
    tokens.each_cons(2) { |a, b| assert_operator b, :>, a }
  end

  def test_other_threads_run_while_one_waits
    key = TestHelper.unique_key
    holder = broker.acquire(key, 5, 60, 0)
    waiter = Thread.new { broker.acquire(key, 60, 10, 0) }
    assert TestHelper.wait_until(20) { server.waiters(key) == 1 }
    ticks = 0
    50.times do
      ticks += 1
      sleep 0.01
    end
    assert_equal 50, ticks
    assert waiter.alive?, "the waiter should still be waiting in the queue"
    assert_equal true, holder.release
    granted = waiter.join(30)&.value
    refute_nil granted
    assert_equal true, granted.release
  end

  def test_timeout_cancels_a_waiting_acquire
    key = TestHelper.unique_key
    holder = broker.acquire(key, 5, 60, 0)
    t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    assert_raises(Timeout::Error) { Timeout.timeout(1) { broker.acquire(key, 60, 30, 0) } }
    assert_operator Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0, :<, 30
    # The cancelled waiter left the queue (its connection was closed) ...
    assert TestHelper.wait_until(15) { server.waiters(key).zero? }, "the cancelled acquire is still queued"
    assert_equal true, holder.release
    # ... so the key goes to the next waiter, not to the cancelled one.
    nxt = broker.acquire(key, 10, 30, 0)
    refute_nil nxt
    assert_operator nxt.token, :>, holder.token
    assert_equal true, nxt.release
  end

  class Stop < StandardError; end

  def test_thread_raise_cancels_a_waiting_acquire
    key = TestHelper.unique_key
    holder = broker.acquire(key, 5, 60, 0)
    waiter = Thread.new do
      broker.acquire(key, 60, 30, 0)
      :acquired
    rescue Stop
      :stopped
    end
    assert TestHelper.wait_until(20) { server.waiters(key) == 1 }
    waiter.raise(Stop)
    refute_nil waiter.join(20), "Thread#raise did not interrupt the acquire"
    assert_equal :stopped, waiter.value
    assert TestHelper.wait_until(15) { server.waiters(key).zero? }
    holder.release
    # The broker keeps working.
    t = broker.acquire(key, 10, 10, 0)
    refute_nil t
    t.release
  end

  def test_ctrl_c_interrupts_a_waiting_acquire
    key = TestHelper.unique_key
    holder = broker.acquire(key, 5, 60, 0)
    code = <<~RUBY
      # Ctrl-C raises Interrupt even when this process was started with
      # SIGINT ignored (a job started with `&` by a shell without job control).
      trap("INT", "DEFAULT")
      require "ticketing"
      b = Ticketing::TicketBroker.connect(#{server.addr.inspect})
      begin
        b.acquire(#{key.inspect}, 60, 30, 0)
        puts "acquired"
      rescue Interrupt
        puts "interrupted"
        $stdout.flush
        exit!(3)
      end
    RUBY
    out = Tempfile.new("ctrl-c")
    pid = Process.spawn(RbConfig.ruby, "-e", code, out: out.path, err: %i[child out], chdir: Dir.tmpdir)
    queued = TestHelper.wait_until(30) { server.waiters(key) == 1 }
    Process.kill("INT", pid)
    status = TestHelper.wait_pid(pid, 30)
    assert queued, "the child never queued: #{File.read(out.path)}"
    refute_nil status, "Ctrl-C did not interrupt the acquire"
    assert_equal 3, status.exitstatus, File.read(out.path)
    assert_includes File.read(out.path), "interrupted"
    holder.release
  ensure
    out&.close!
  end

  def test_concurrent_acquires_on_many_keys
    keys = Array.new(8) { TestHelper.unique_key }
    threads = keys.map do |k|
      Thread.new do
        Array.new(5) { broker.with_lock(k, wait: 10, lease: 10, budget: 0, &:token) }
      end
    end
    tokens = threads.map { |th| th.join(60).value }
    tokens.each { |ts| assert_equal ts.sort.uniq, ts }
    assert_equal 40, tokens.flatten.uniq.size
  end
end
