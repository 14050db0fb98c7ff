# frozen_string_literal: true

require_relative "helper"

# A 3-node cluster: an acquire in flight when the leader is killed ends in
# a Ticket or IndeterminateError (never nil, a hang, or a wrong Ticket);
# after the failover a new leader grants with a larger token.
class TestCluster3 < Minitest::Test
  def setup
    @cluster = TestCluster.new
  end

  def teardown
    @broker&.close
    @cluster.stop
  end

  def test_acquire_across_a_leader_kill
    leader = @cluster.leader(30)
    refute_nil leader, "no leader elected:\n#{@cluster.output}"
    @broker = Ticketing::TicketBroker.new(@cluster.client)
    assert @broker.wait_ready(15)
    first = @broker.acquire("cluster-key-1", 5, 30, 0)
    refute_nil first

    waiter = Thread.new do
      @broker.acquire("cluster-key-1", 20, 5, 0)
    rescue Ticketing::Error => e
      e
    end
    queued = TestHelper.wait_until(10) { @cluster.waiters(leader, "cluster-key-1") == 1 }
    assert queued, "the acquire never queued behind `first`"
    @cluster.kill(leader)
    t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    refute_nil waiter.join(40), "the acquire hung across the leader kill"
    outcome = waiter.value
    assert(outcome.is_a?(Ticketing::Ticket) || outcome.is_a?(Ticketing::IndeterminateError),
           "expected a Ticket or IndeterminateError, got #{outcome.inspect}")
    if outcome.is_a?(Ticketing::Ticket)
      assert_operator outcome.token, :>, first.token
      assert_equal "cluster-key-1", outcome.key
    end

    outcomes = []
    got = nil
    while got.nil? && Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0 < 40
      begin
        got = @broker.acquire("cluster-key-2", 5, 10, 0)
        outcomes << (got ? :ticket : :none)
      rescue Ticketing::IndeterminateError
        outcomes << :indeterminate
      rescue Ticketing::UnavailableError
        outcomes << :unavailable
      end
    end
    refute_nil got, "no grant after the failover: #{outcomes.inspect}\n#{@cluster.output}"
    assert_operator got.token, :>, first.token, "tokens increase across the leader change"
    assert_equal true, got.release
  end
end
