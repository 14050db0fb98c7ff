# frozen_string_literal: true

# Shared by every test file: a real ticketing-server on loopback (port 0
# for clients, a free port for the admin HTTP), a 3-node cluster, and
# bounded wait helpers. The server binary is $TICKETING_SERVER_BIN.
#
# The tests run against the INSTALLED gem (run-tests.sh installs the built
# .gem into a temporary GEM_HOME); nothing here puts the source tree's lib/
# on the load path.

require "minitest/autorun"
require "ticketing"
require "json"
require "net/http"
require "rbconfig"
require "securerandom"
require "socket"
require "tempfile"
require "timeout"

module TestHelper
  module_function

  def server_bin
    path = ENV.fetch("TICKETING_SERVER_BIN", File.expand_path("../../target/debug/ticketing-server", __dir__))
    raise "server binary #{path} not found: set TICKETING_SERVER_BIN" unless File.executable?(path)

    path
  end

  def free_port
    s = TCPServer.new("127.0.0.1", 0)
    s.addr[1]
  ensure
    s&.close
  end

  def server_env(extra = {})
    env = ENV.to_h.reject { |k, _| k.start_with?("TICKETING_") }
    env["RUST_LOG"] ||= "warn"
    env.merge(extra)
  end

  # Yields until the block is truthy, at most `timeout` seconds; returns
  # its last value.
  def wait_until(timeout, step: 0.05)
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + timeout
    loop do
      value = yield
      return value if value
      return value if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline

      sleep step
    end
  end

  # Waits for a child process, at most `timeout` seconds (then kills it);
  # returns its Process::Status, or nil if it had to be killed.
  def wait_pid(pid, timeout)
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + timeout
    loop do
      _, status = Process.waitpid2(pid, Process::WNOHANG)
      return status if status
      if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
        Process.kill("KILL", pid)
        Process.waitpid2(pid)
        return nil
      end
      sleep 0.05
    end
  end

  def unique_key(prefix = "k")
    "#{prefix}-#{SecureRandom.hex(6)}"
  end

  # Runs Ruby code in a child process with this process's GEM_HOME (the
  # installed gem); returns [status, output]. Killed after `timeout`.
  def run_ruby(code, timeout: 60)
    out = Tempfile.new("ruby-out")
    pid = Process.spawn(RbConfig.ruby, "-e", code, out: out.path, err: %i[child out], chdir: Dir.tmpdir)
    status = wait_pid(pid, timeout)
    [status, File.read(out.path)]
  ensure
    out&.close!
  end
end

# A standalone server process. `addr` is its client address; `admin` its
# admin HTTP address (`/locks/<key>` tells holder and waiter count).
class TestServer
  attr_reader :addr, :admin

  def initialize(args: [], env: {})
    last = ""
    5.times do # the free admin port may be taken before the server binds it
      @log = Tempfile.new("ticketing-server")
      @admin = "127.0.0.1:#{TestHelper.free_port}"
      cmd = [TestHelper.server_bin, "--listen", "127.0.0.1:0", "--admin-listen", @admin, *args]
      @out, w = IO.pipe
      @pid = Process.spawn(TestHelper.server_env(env), *cmd, out: w, err: @log.path)
      w.close
      line = @out.wait_readable(15) && @out.gets
      if line && (m = line.match(/listening on (\S+)/))
        @addr = m[1]
        return if TestHelper.wait_until(10) { admin_up? }
      end
      stop
      last = File.read(@log.path)
    end
    raise "ticketing-server did not start: #{last[-2000..] || last}"
  end

  def admin_up?
    Net::HTTP.get_response(URI("http://#{@admin}/healthz")).is_a?(Net::HTTPSuccess)
  rescue SystemCallError, IOError
    false
  end

  # The admin view of a key: {"holder" => ..., "waiters" => [...] in FIFO order}.
  def lock_info(key)
    res = Net::HTTP.get_response(URI("http://#{@admin}/locks/#{key}"))
    JSON.parse(res.body)
  end

  def waiters(key)
    lock_info(key)["waiters"]&.length
  end

  def stop
    return unless @pid

    begin
      Process.kill("TERM", @pid)
    rescue Errno::ESRCH
      nil
    end
    TestHelper.wait_pid(@pid, 10)
    @pid = nil
    @out&.close
    @log&.close!
  end
end

# A 3-node cluster on free loopback ports; node 0 bootstraps.
class TestCluster
  attr_reader :client, :pids

  def initialize
    @client = Array.new(3) { "127.0.0.1:#{TestHelper.free_port}" }
    peer = Array.new(3) { "127.0.0.1:#{TestHelper.free_port}" }
    @admin = Array.new(3) { "127.0.0.1:#{TestHelper.free_port}" }
    @logs = Array.new(3) { Tempfile.new("ticketing-node") }
    env = TestHelper.server_env("TICKETING_PEER_TOKEN" => "ruby-test-peer-token")
    @pids = Array.new(3) do |i|
      args = ["--listen", @client[i], "--peer-listen", peer[i], "--peers", peer.join(","), "--admin-listen", @admin[i]]
      args << "--bootstrap" if i.zero?
      pid = Process.spawn(env, TestHelper.server_bin, *args, out: @logs[i].path, err: %i[child out])
      sleep 0.3 if i.zero? # bootstrap retries until every peer is reachable
      pid
    end
  end

  # The index of the node whose admin serves /locks (the serving leader).
  def leader(timeout)
    TestHelper.wait_until(timeout, step: 0.2) do
      (0..2).find do |i|
        next false unless @pids[i]

        Net::HTTP.get_response(URI("http://#{@admin[i]}/locks/probe")).is_a?(Net::HTTPSuccess)
      rescue SystemCallError, IOError
        false
      end
    end
  end

  # How many waiters node `i` (the leader) shows queued on `key`.
  def waiters(i, key)
    res = Net::HTTP.get_response(URI("http://#{@admin[i]}/locks/#{key}"))
    JSON.parse(res.body)["waiters"]&.length
  rescue SystemCallError, IOError, JSON::ParserError
    nil
  end

  def kill(i)
    Process.kill("KILL", @pids[i])
    TestHelper.wait_pid(@pids[i], 10)
    @pids[i] = nil
  end

  def output
    @logs.each_with_index.map { |l, i| "--- node #{i}\n#{File.read(l.path)[-1500..] || File.read(l.path)}" }.join("\n")
  end

  def stop
    @pids.each_with_index do |pid, i|
      next unless pid

      begin
        Process.kill("KILL", pid)
      rescue Errno::ESRCH
        nil
      end
      TestHelper.wait_pid(pid, 10)
      @pids[i] = nil
    end
    @logs.each(&:close!)
  end
end

# One server per test class (started lazily, stopped at exit); every test
# uses its own keys.
module SharedServer
  def self.included(base)
    base.extend(ClassMethods)
  end

  module ClassMethods
    def server_args
      []
    end

    def server
      @server ||= begin
        srv = TestServer.new(args: server_args)
        Minitest.after_run { srv.stop }
        srv
      end
    end
  end

  def server
    self.class.server
  end

  def broker
    @broker ||= Ticketing::TicketBroker.connect(server.addr).tap { |b| assert b.wait_ready(10) }
  end

  def teardown
    @broker&.close
    super
  end
end
