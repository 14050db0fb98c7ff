# frozen_string_literal: true

# A ticket seller in Ruby: sells seats of one event until none is left.
#
# Each sale: take the lock on the event key, read the stock, then in ONE
# database transaction guarded by the fence (docs/fencing.md) record the seat
# and decrement the stock; commit; release. Run by examples/ticket-sale/demo;
# the arguments are described in examples/README.md.
# SQLite: Debian's ruby-sqlite3; PostgreSQL: ruby-pg.

require "optparse"
require "ticketing"

# The token is not above the fence's high-water mark: roll back.
class Stale < StandardError; end

# SQLite (WAL; the demo created the tables).
class SqliteStore
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
end

# PostgreSQL (READ COMMITTED: the fence UPDATE re-checks high_water < token
# on the latest row version after waiting for a concurrent writer).
class PostgresStore
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
end.parse!
%i[addrs db event name].each { |k| abort("seller.rb: --#{k} is required") unless opts[k] }

$stdout.sync = true
name = opts[:name]
store = open_store(opts[:db])
broker = Ticketing::TicketBroker.new(opts[:addrs])
counts = { sold: 0, fence_refusals: 0, timeouts: 0, busy: 0, indeterminate: 0, unavailable: 0,
           insufficient_time: 0, release_failures: 0, db_errors: 0 }
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
    # Maybe granted, maybe not: never enter. A grant returns at lease end.
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
