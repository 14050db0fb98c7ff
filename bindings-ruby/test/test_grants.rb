# frozen_string_literal: true

require_relative "helper"

# Counted grants (semaphores, read/write locks) and multi-key grants
# against a real server (docs/ruby.md). Each holder has its own broker
# (its own owner), as separate processes would.
class TestGrants < Minitest::Test
  include SharedServer

  def brokers(count)
    @extra ||= []
    Array.new(count) do
      Ticketing::TicketBroker.connect(server.addr).tap do |b|
        assert b.wait_ready(10)
        @extra << b
      end
    end
  end

  def teardown
    @extra&.each(&:close)
    super
  end

  def queued(key, count)
    assert TestHelper.wait_until(30) { server.waiters(key) == count },
           "#{key}: #{server.waiters(key)} waiters, expected #{count}"
  end

  def test_semaphore_of_two_third_waits_and_reuses_the_released_slot
    key = TestHelper.unique_key("sem")
    a, b, c = brokers(3)
    t1 = a.acquire_shared(key, 2, 0, 30)
    t2 = b.acquire_shared(key, 2, 0, 30, 0)
    refute_nil t1
    refute_nil t2
    assert_equal [0, 1], [t1.slot, t2.slot].sort
    assert_equal [key], t1.keys
    assert_predicate t1.keys, :frozen?
    assert_operator t2.token, :>, t1.token, "each counted grant has its own token"
    assert_match(/slot=#{t1.slot}/, t1.inspect)

    assert_nil c.acquire_shared(key, 2, 0, 30), "both permits held: wait 0 is refused at once"
    assert_nil c.acquire_shared(key, 2, 1, 30), "not granted within wait"
    assert_raises(Ticketing::LockTimeoutError) do
      c.with_shared_lock(key, 2, wait: 0, lease: 5) { flunk "must not enter" }
    end

    third = Thread.new { c.acquire_shared(key, 2, 30, 30) }
    queued(key, 1)
    assert third.alive?, "the third holder must wait"
    freed = t1.slot
    assert_equal true, t1.release
    t3 = third.join(60)&.value
    refute_nil t3, "the third holder was not granted after a release"
    assert_equal freed, t3.slot, "the released slot is the lowest free one"
    assert_operator t3.token, :>, t2.token
    assert_equal true, t2.release
    assert_equal true, t3.release
  end

  def test_with_shared_lock_releases_on_exit_and_when_the_block_raises
    key = TestHelper.unique_key("wsl")
    a, b = brokers(2)
    value = a.with_shared_lock(key, 1, wait: 1, lease: 30) do |t|
      assert_equal 0, t.slot
      assert_nil b.acquire_shared(key, 1, 0, 5)
      :the_value
    end
    assert_equal :the_value, value
    again = b.acquire_shared(key, 1, 0, 5)
    refute_nil again, "released on exit"
    assert_equal true, again.release

    assert_raises(RuntimeError) { a.with_shared_lock(key, 1, wait: 1, lease: 30) { raise "boom" } }
    after = b.acquire_shared(key, 1, 0, 5)
    refute_nil after, "released when the block raised"
    assert_equal true, after.release
  end

  def test_readers_share_and_a_writer_waits_for_them
    key = TestHelper.unique_key("rw")
    a, b, w = brokers(3)
    entered = Queue.new
    writer = nil
    # Leases longer than the writer's wait: only the release at the block's end lets it in.
    a.with_read_lock(key, wait: 1, lease: 120) do |r1|
      b.with_read_lock(key, wait: 1, lease: 120) do |r2|
        refute_nil r1.slot
        refute_nil r2.slot
        refute_equal r1.slot, r2.slot
        assert_raises(Ticketing::LockTimeoutError) do
          w.with_write_lock(key, wait: 0, lease: 5) { flunk "a writer must not enter while readers hold the key" }
        end
        writer = Thread.new do
          w.with_write_lock(key, wait: 30, lease: 30) do |t|
            entered << true
            t.slot
          end
        end
        queued(key, 1)
        assert entered.empty?, "the writer entered while two readers held the key"
      end
    end
    assert_nil writer.join(60)&.value, "a write grant is exclusive: no slot"
    assert_equal 1, entered.size

    w.with_write_lock(key, wait: 1, lease: 30) do
      assert_raises(Ticketing::LockTimeoutError) do
        a.with_read_lock(key, wait: 0, lease: 5) { flunk "a reader must not enter while the writer holds the key" }
      end
    end
    a.with_read_lock(key, wait: 1, lease: 5) { |r| refute_nil r.slot }
  end

  def test_acquire_all_one_token_for_every_key_and_release_frees_both
    k1 = TestHelper.unique_key("all1")
    k2 = TestHelper.unique_key("all2")
    k3 = TestHelper.unique_key("all3")
    a, b = brokers(2)
    t = a.acquire_all([k1, k2], 0, 30)
    refute_nil t
    assert_equal [k1, k2], t.keys
    assert_predicate t.keys, :frozen?
    assert_equal k1, t.key
    assert_nil t.slot
    assert_nil b.acquire(k1, 0, 5)
    assert_nil b.acquire(k2, 0, 5)
    assert_nil b.acquire_all([k2, k3], 0, 5), "an overlapping acquire_all is not granted"
    free = b.acquire(k3, 0, 5)
    refute_nil free, "k3 stays free: the refused acquire_all took nothing"
    assert_equal true, free.release
    assert_equal true, t.release
    [k1, k2].each do |k|
      after = b.acquire(k, 0, 5)
      refute_nil after, "#{k} was not freed"
      assert_operator after.token, :>, t.token
      assert_equal true, after.release
    end
  end

  def test_overlapping_acquire_all_waits_for_the_release
    k1 = TestHelper.unique_key("ov1")
    k2 = TestHelper.unique_key("ov2")
    k3 = TestHelper.unique_key("ov3")
    a, b = brokers(2)
    t = a.acquire_all([k1, k2], 0, 30)
    refute_nil t
    waiter = Thread.new { b.acquire_all([k3, k2], 30, 30) } # another key order
    queued(k2, 1)
    assert waiter.alive?, "the overlapping acquire_all must wait"
    assert_equal true, t.release
    t2 = waiter.join(60)&.value
    refute_nil t2
    assert_equal [k3, k2], t2.keys
    assert_operator t2.token, :>, t.token
    assert_nil a.acquire(k3, 0, 5), "k3 is held by the second acquire_all"
    assert_equal true, t2.release
    t3 = a.acquire(k3, 0, 5)
    refute_nil t3
    assert_equal true, t3.release
  end

  def test_with_all_locks_releases_on_exit_and_raises_lock_timeout
    k1 = TestHelper.unique_key("wal1")
    k2 = TestHelper.unique_key("wal2")
    a, b = brokers(2)
    value = a.with_all_locks([k1, k2], wait: 1, lease: 30) do |t|
      assert_equal [k1, k2], t.keys
      assert_match(/keys=/, t.inspect)
      err = assert_raises(Ticketing::LockTimeoutError) do
        b.with_all_locks([k2, k1], wait: 0, lease: 5) { flunk "must not enter" }
      end
      assert_equal :lock_timeout, err.code
      :done
    end
    assert_equal :done, value
    again = b.acquire_all([k2, k1], 0, 5)
    refute_nil again, "with_all_locks released every key on exit"
    assert_equal true, again.release
  end
end
