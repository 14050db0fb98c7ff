# frozen_string_literal: true

require_relative "helper"
require "tmpdir"

# Principals (docs/security.md, "Several teams: principals"): a key outside
# the token's prefixes raises Ticketing::ForbiddenError with the key, never
# retried; the broker goes on serving allowed keys.
class TestPrincipals < Minitest::Test
  def setup
    @dir = Dir.mktmpdir("ticketing-principals")
    tokens = File.join(@dir, "orders.tokens")
    File.write(tokens, "orders-token\n")
    config = File.join(@dir, "ticketing.toml")
    File.write(config, "[[principal]]\nname = \"orders\"\ntokens_file = \"#{tokens}\"\nkeys = [\"orders/\"]\n")
    @server = TestServer.new(args: ["--config", config])
    @broker = Ticketing::TicketBroker.new([@server.addr], token: "orders-token")
    assert @broker.wait_ready(10)
  end

  def teardown
    @broker&.close
    @server&.stop
    FileUtils.remove_entry(@dir) if @dir
  end

  def test_forbidden_key_raises_with_the_key
    e = assert_raises(Ticketing::ForbiddenError) { @broker.acquire("payments/1", 1, 10) }
    assert_equal "payments/1", e.key
    assert_equal :forbidden, e.code
    assert_kind_of Ticketing::Error, e
    assert_includes e.message, "payments/1"
    e = assert_raises(Ticketing::ForbiddenError) { @broker.acquire_all(%w[orders/1 payments/2], 1, 10) }
    assert_equal "payments/2", e.key
    ticket = @broker.acquire("orders/1", 1, 10)
    refute_nil ticket
    assert ticket.release
  end
end
