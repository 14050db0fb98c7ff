# frozen_string_literal: true

require_relative "helper"

# Fork safety and the best-effort release of a garbage-collected ticket.
class TestProcess < Minitest::Test
  include SharedServer

  def test_fork_child_starts_afresh
    k1 = TestHelper.unique_key
    k2 = TestHelper.unique_key
    warm = broker.acquire(k1, 5, 10, 0) # the parent's runtime and driver are running
    assert_equal true, warm.release
    held = broker.acquire(k2, 5, 60, 0)
    preloaded = Ticketing::TicketBroker.new([server.addr]) # built before the fork, first used in the child
    rd, wr = IO.pipe
    pid = fork do
      rd.close
      result =
        begin
          t = broker.acquire(k1, 10, 10, 0) # same broker object: new runtime, new connections
          got = t ? "ticket #{t.token} #{t.release}" : "nil"
          parent_ticket =
            begin
              held.release
              "released-parents"
            rescue Ticketing::ClosedError
              "closed"
            end
          pt = preloaded.acquire(TestHelper.unique_key, 10, 10, 0)
          pre = pt ? "preloaded #{pt.release}" : "preloaded nil"
          "#{got} #{parent_ticket} #{pre}"
        rescue Exception => e # rubocop:disable Lint/RescueException
          "error #{e.class}: #{e.message}"
        end
      wr.puts(result)
      wr.close
      exit!(0) # no at_exit hooks (minitest) in the child
    end
    wr.close
    status = TestHelper.wait_pid(pid, 60)
    line = rd.read.to_s.strip
    rd.close
    refute_nil status, "the forked child hung"
    assert_match(/\Aticket \d+ true closed preloaded true\z/, line)
    assert_operator Integer(line.split[1]), :>, warm.token
    # The parent is untouched: it still holds k2 and its broker works.
    refute_nil server.lock_info(k2)["holder"]
    assert_equal true, held.release
    t = broker.acquire(k1, 5, 10, 0)
    refute_nil t
    t.release
  ensure
    preloaded&.close
  end

  def acquire_and_forget(key)
    Thread.new { broker.acquire(key, 5, 120, 0).token }.value
  end

  def test_gc_releases_an_unreleased_ticket
    key = TestHelper.unique_key
    token = acquire_and_forget(key)
    got = nil
    20.times do
      GC.start(full_mark: true, immediate_sweep: true)
      got = broker.acquire(key, 1, 10, 0)
      break if got
    end
    refute_nil got, "the forgotten ticket (lease 120 s) was not released after GC"
    assert_operator got.token, :>, token
    assert_equal true, got.release
  end
end
