# frozen_string_literal: true

# A ticket seller in Ruby: sells seats of one event until none is left.
#
# Each sale: take the lock on the event key, read the stock, then in ONE
# database transaction guarded by the fence (docs/fencing.md) record the seat
# and decrement the stock; commit; release. With --basket K: K unsold seats
# at once under the locks of every seat (acquire_all), fenced per seat. With
# --general N: a permit of a semaphore of N on the event key (acquire_shared)
# and a seat of the box-office window of its slot, fenced per (key, slot).
# Run by examples/ticket-sale/demo; the arguments are described in
# examples/README.md.
# SQLite: Debian's ruby-sqlite3; PostgreSQL: ruby-pg.

require "optparse"
require "ticketing"

# The token is not above the fence's high-water mark: roll back.
class Stale < StandardError; end

# Basket mode: the lock key (and fence key) of one seat.
def seat_key(event, seat) = "#{event}/#{seat}"

# General admission: the fence key of one slot of the event's semaphore.
def slot_fence_key(event, slot) = "#{event}##{slot}"

# Seat numbers as an SQL list (integers only: nothing to quote).
def sql_list(seats) = seats.map { |s| Integer(s).to_s }.join(",")

# Baskets and general admission, on top of a store's `query(sql, params)` and
# `fenced(token, fence_keys, writes)` (ONE transaction: every fence key
# fenced with the token, false if any is stale; then the writes).
module Modes
  def unsold_seats(event)
    _, seats = read_stock(event)
    sold = query("SELECT DISTINCT seat FROM sales WHERE event = #{ph(1)}", [event]).map { |r| r[0].to_i }
    (1..seats).to_a - sold
  end

  def sold_among(event, seats)
    query("SELECT count(*) FROM sales WHERE event = #{ph(1)} AND seat IN (#{sql_list(seats)})", [event])[0][0].to_i
  end

  def read_window(event, slot)
    rows = query("SELECT remaining, seats FROM windows WHERE event = #{ph(1)} AND slot = #{ph(2)}", [event, slot])
    raise "no window #{slot} for #{event}" if rows.empty?

    rows[0].map(&:to_i)
  end

  # Every seat sold, each fenced, in ONE transaction; the stock decremented
  # in the database (other baskets sell at the same time).
  def sell_basket(event, token, seats, seller, fence)
    ordered = seats.sort # one order for every writer
    sale = "INSERT INTO sales (event, seat, token, seller) VALUES (#{ph(1)}, #{ph(2)}, #{ph(3)}, #{ph(4)})"
    writes = ordered.map { |s| [sale, [event, s, token, seller]] }
    writes << ["UPDATE stock SET remaining = remaining - #{ph(1)} WHERE event = #{ph(2)}", [ordered.size, event]]
    fenced(token, fence ? ordered.map { |s| seat_key(event, s) } : [], writes)
  end

  # A seat of window `slot`: fenced per (key, slot), the window's count
  # written from what was read under the permit, the stock decremented.
  def sell_general(event, slot, token, seat, window_remaining, seller, fence)
    fenced(token, fence ? [slot_fence_key(event, slot)] : [], [
             ["INSERT INTO sales (event, seat, token, seller) VALUES (#{ph(1)}, #{ph(2)}, #{ph(3)}, #{ph(4)})",
              [event, seat, token, seller]],
             ["UPDATE windows SET remaining = #{ph(1)} WHERE event = #{ph(2)} AND slot = #{ph(3)}",
              [window_remaining - 1, event, slot]],
             ["UPDATE stock SET remaining = remaining - 1 WHERE event = #{ph(1)}", [event]]
           ])
  end
end

# SQLite (WAL; the demo created the tables).
class SqliteStore
  include Modes

  def initialize(path)
    require "sqlite3"
    @db = SQLite3::Database.new(path)
    @db.busy_timeout = 30_000
  end

  def errors = [SQLite3::Exception]

  def read_stock(event)
    row = @db.get_first_row("SELECT remaining, seats FROM stock WHERE event = ?", [event])
    raise "no stock row for #{event}" unless row

    row.map(&:to_i)
  end

  # Records the sale and sets the stock to remaining - 1 in ONE transaction
  # with the fence. false: the token is stale; nothing was written.
  def sell(event, token, seat, remaining, seller, fence)
    # :immediate takes SQLite's write lock now, so the fence check and the
    # writes see one state and commit together; an exception rolls back.
    @db.transaction(:immediate) do
      if fence
        @db.execute("INSERT OR IGNORE INTO fence (key, high_water) VALUES (?, 0)", [event])
        @db.execute("UPDATE fence SET high_water = ? WHERE key = ? AND high_water < ?", [token, event, token])
        raise Stale if @db.changes.zero?
      end
      @db.execute("INSERT INTO sales (event, seat, token, seller) VALUES (?, ?, ?, ?)", [event, seat, token, seller])
      @db.execute("UPDATE stock SET remaining = ? WHERE event = ?", [remaining - 1, event])
    end
    true
  rescue Stale
    false
  end

  def ph(_) = "?"

  def query(sql, params) = @db.execute(sql, params)

  def fenced(token, fence_keys, writes)
    @db.transaction(:immediate) do
      fence_keys.each do |key|
        @db.execute("INSERT OR IGNORE INTO fence (key, high_water) VALUES (?, 0)", [key])
        @db.execute("UPDATE fence SET high_water = ? WHERE key = ? AND high_water < ?", [token, key, token])
        raise Stale if @db.changes.zero?
      end
      writes.each { |sql, params| @db.execute(sql, params) }
    end
    true
  rescue Stale
    false
  end
end

# PostgreSQL (READ COMMITTED: the fence UPDATE re-checks high_water < token
# on the latest row version after waiting for a concurrent writer).
class PostgresStore
  include Modes

  def initialize(url)
    require "pg"
    @db = PG.connect(url)
  end

  def errors = [PG::Error]

  def read_stock(event)
    r = @db.exec_params("SELECT remaining, seats FROM stock WHERE event = $1", [event])
    raise "no stock row for #{event}" if r.ntuples.zero?

    [r.getvalue(0, 0).to_i, r.getvalue(0, 1).to_i]
  end

  def sell(event, token, seat, remaining, seller, fence)
    @db.transaction do |c| # an exception rolls back
      if fence
        c.exec_params("INSERT INTO fence (key, high_water) VALUES ($1, 0) ON CONFLICT (key) DO NOTHING", [event])
        r = c.exec_params("UPDATE fence SET high_water = $1 WHERE key = $2 AND high_water < $1", [token, event])
        raise Stale if r.cmd_tuples.zero?
      end
      c.exec_params("INSERT INTO sales (event, seat, token, seller) VALUES ($1, $2, $3, $4)",
                    [event, seat, token, seller])
      c.exec_params("UPDATE stock SET remaining = $1 WHERE event = $2", [remaining - 1, event])
    end
    true
  rescue Stale
    false
  end

  def ph(i) = "$#{i}"

  def query(sql, params) = @db.exec_params(sql, params).values

  def fenced(token, fence_keys, writes)
    @db.transaction do |c| # an exception rolls back
      fence_keys.each do |key|
        c.exec_params("INSERT INTO fence (key, high_water) VALUES ($1, 0) ON CONFLICT (key) DO NOTHING", [key])
        r = c.exec_params("UPDATE fence SET high_water = $1 WHERE key = $2 AND high_water < $1", [token, key])
        raise Stale if r.cmd_tuples.zero?
      end
      writes.each { |sql, params| c.exec_params(sql, params) }
    end
    true
  rescue Stale
    false
  end
end

def open_store(url)
  return PostgresStore.new(url) if url.start_with?("postgres://", "postgresql://")

  SqliteStore.new(url.sub(%r{\Asqlite://}, "").sub(/\Asqlite:/, ""))
end

opts = { lease: 5, wait: 10, work_ms: 10, deadline: 300.0, pause_after_sales: nil, wait_start: false, fence: true }
OptionParser.new do |o|
  o.banner = "A fenced ticket seller (Ruby)."
  o.on("--addrs LIST", "comma-separated server addresses") { |v| opts[:addrs] = v.split(",") }
  o.on("--db URL", "sqlite:///path.db or postgres://...") { |v| opts[:db] = v }
  o.on("--event KEY", "the event: lock key and fence key") { |v| opts[:event] = v }
  o.on("--name NAME", "this seller's name") { |v| opts[:name] = v }
  o.on("--lease SECS", Integer) { |v| opts[:lease] = v }
  o.on("--wait SECS", Integer) { |v| opts[:wait] = v }
  o.on("--work-ms MS", Integer) { |v| opts[:work_ms] = v }
  o.on("--deadline SECS", Float) { |v| opts[:deadline] = v }
  o.on("--wait-start", "print READY once connected and wait for a line on stdin") { opts[:wait_start] = true }
  o.on("--pause-after-sales N", Integer, "after N sales, at the next grant: print HOLDING, wait for a line") do |v|
    opts[:pause_after_sales] = v
  end
  o.on("--no-fence", "write without the fence (demonstration only)") { opts[:fence] = false }
  o.on("--basket K", Integer, "K seats (2-16) at once, under the lock of every seat") { |v| opts[:basket] = v }
  o.on("--general N", Integer, "general admission: a semaphore of N permits, a window per slot") do |v|
    opts[:general] = v
  end
end.parse!
%i[addrs db event name].each { |k| abort("seller.rb: --#{k} is required") unless opts[k] }
abort("seller.rb: --basket and --general exclude each other") if opts[:basket] && opts[:general]
abort("seller.rb: --basket must be 2..16") if opts[:basket] && !(2..16).cover?(opts[:basket])
abort("seller.rb: --general must be 1..1000") if opts[:general] && !(1..1000).cover?(opts[:general])

$stdout.sync = true
name = opts[:name]
store = open_store(opts[:db])
broker = Ticketing::TicketBroker.new(opts[:addrs])
counts = { sold: 0, fence_refusals: 0, timeouts: 0, busy: 0, indeterminate: 0, unavailable: 0,
           insufficient_time: 0, release_failures: 0, db_errors: 0, basket_conflicts: 0 }
result = -> { "RESULT name=#{name}" + counts.map { |k, v| " #{k}=#{v}" }.join }
log = ->(msg) { warn "#{name}: #{msg}" }
backoff = 0.05
retry_later = lambda do |what|
  counts[what] += 1
  sleep(backoff * (0.5 + rand))
  backoff = [backoff * 2, 1.0].min
end
paused = false
deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + opts[:deadline]

log.call("no leader within 10 s; trying anyway") unless broker.wait_ready(10)
if opts[:wait_start]
  puts "READY"
  $stdin.gets
end

# Every outcome of an acquire the library defines: the ticket, or nil to try again.
acquire = lambda do |&get|
  ticket = get.call
  counts[:timeouts] += 1 if ticket.nil?
  backoff = 0.05 if ticket
  ticket
rescue Ticketing::BusyError
  retry_later.call(:busy)
  nil
rescue Ticketing::IndeterminateError
  # Maybe granted, maybe not: never enter. The client releases such a grant within 5 s.
  retry_later.call(:indeterminate)
  nil
rescue Ticketing::UnavailableError
  retry_later.call(:unavailable)
  nil
rescue Ticketing::InsufficientTimeError
  retry_later.call(:insufficient_time)
  nil
end
release = lambda do |t|
  t.release
rescue Ticketing::Error => e
  counts[:release_failures] += 1
  log.call("release: #{e.message}")
end
pause = lambda do |what|
  if opts[:pause_after_sales] && !paused && counts[:sold] >= opts[:pause_after_sales]
    paused = true
    puts "HOLDING #{what}"
    $stdin.gets
  end
end
empty = [] # general admission: permits of sold-out windows, kept while asking for another
release_empty = -> { release.call(empty.pop) until empty.empty? }

while opts[:basket] || opts[:general]
  if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
    log.call("deadline of #{opts[:deadline]} s passed")
    puts result.call
    exit 3
  end
  ticket = nil
  begin
    if opts[:basket]
      unsold = store.unsold_seats(opts[:event])
      break if unsold.empty?

      seats = unsold.sample([opts[:basket], unsold.size].min) # at random, in random order
      keys = seats.map { |s| seat_key(opts[:event], s) }
      ticket = acquire.call do
        if keys.size == 1
          broker.acquire(keys[0], opts[:wait], opts[:lease], 1)
        else
          broker.acquire_all(keys, opts[:wait], opts[:lease], 1)
        end
      end
      next unless ticket

      if store.sold_among(opts[:event], seats).positive?
        counts[:basket_conflicts] += 1 # another basket took one of them before our grant
        next
      end
      pause.call("token=#{ticket.token} seats=#{seats.join(",")}")
      sleep(opts[:work_ms] / 1000.0)
      if store.sell_basket(opts[:event], ticket.token, seats, name, opts[:fence])
        counts[:sold] += seats.size
      else
        counts[:fence_refusals] += 1
        log.call("fence refused token #{ticket.token} (seats #{seats.join(",")}): a newer holder wrote first")
      end
    else
      # The event's stock is exact (decremented in the database): it says when the sale is over.
      left, = store.read_stock(opts[:event])
      break if left <= 0

      n = opts[:general]
      ticket = acquire.call { broker.acquire_shared(opts[:event], n, opts[:wait], opts[:lease], 1) }
      unless ticket
        release_empty.call
        next
      end
      slot = ticket.slot
      remaining, seats_w = store.read_window(opts[:event], slot)
      if remaining <= 0
        empty << ticket # sold-out window: keep the permit, ask for another
        ticket = nil
        next
      end
      seat = slot + 1 + (n * (seats_w - remaining)) # window `slot` sells slot+1, slot+1+N, ...
      pause.call("token=#{ticket.token} seat=#{seat} slot=#{slot}")
      sleep(opts[:work_ms] / 1000.0)
      if store.sell_general(opts[:event], slot, ticket.token, seat, remaining, name, opts[:fence])
        counts[:sold] += 1
      else
        counts[:fence_refusals] += 1
        log.call("fence refused token #{ticket.token} (slot #{slot}, seat #{seat}): a newer holder of the slot " \
                 "wrote first")
      end
    end
  rescue *store.errors, RuntimeError => e
    counts[:db_errors] += 1
    log.call("database error, rolled back: #{e.message}")
  ensure
    if ticket
      release.call(ticket)
      release_empty.call
    end
  end
end
if opts[:basket] || opts[:general]
  release_empty.call
  broker.close
  puts result.call
  exit 0
end

loop do
  if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
    log.call("deadline of #{opts[:deadline]} s passed")
    puts result.call
    exit 3
  end
  begin
    ticket = broker.acquire(opts[:event], opts[:wait], opts[:lease], 1)
  rescue Ticketing::BusyError
    retry_later.call(:busy)
    next
  rescue Ticketing::IndeterminateError
    # Maybe granted, maybe not: never enter. The client releases such a grant within 5 s.
    retry_later.call(:indeterminate)
    next
  rescue Ticketing::UnavailableError
    retry_later.call(:unavailable)
    next
  rescue Ticketing::InsufficientTimeError
    retry_later.call(:insufficient_time)
    next
  end
  if ticket.nil?
    counts[:timeouts] += 1
    next
  end
  backoff = 0.05
  done = false
  begin
    remaining, seats = store.read_stock(opts[:event])
    if remaining <= 0
      done = true
    else
      seat = seats - remaining + 1
      if opts[:pause_after_sales] && !paused && counts[:sold] >= opts[:pause_after_sales]
        paused = true
        puts "HOLDING token=#{ticket.token} seat=#{seat}"
        $stdin.gets
      end
      sleep(opts[:work_ms] / 1000.0) # e.g. the payment provider's answer
      if store.sell(opts[:event], ticket.token, seat, remaining, name, opts[:fence])
        counts[:sold] += 1
      else
        counts[:fence_refusals] += 1
        log.call("fence refused token #{ticket.token} (seat #{seat}): a newer holder wrote first")
      end
    end
  rescue *store.errors, RuntimeError => e
    counts[:db_errors] += 1
    log.call("database error, rolled back: #{e.message}")
  ensure
    begin
      ticket.release
    rescue Ticketing::Error => e
      counts[:release_failures] += 1
      log.call("release: #{e.message}")
    end
  end
  break if done
end
broker.close
puts result.call
