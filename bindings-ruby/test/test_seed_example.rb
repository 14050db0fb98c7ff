# frozen_string_literal: true

require_relative "helper"

# The user's own page (README "A lock in each language"): its Ruby example is
# examples/readme/readme.rb verbatim, and it runs against the installed gem
# in a fresh process with TICKETING_ADDR naming a real server.
class TestSeedExample < Minitest::Test
  include SharedServer

  README = File.expand_path("../../README.md", __dir__)
  EXAMPLE = File.expand_path("../../examples/readme/readme.rb", __dir__)

  def seed_example
    text = File.read(README)
    blocks = text.scan(/^```ruby\n(.*?)^```$/m).flatten
    example = blocks.find { |b| b.include?("Ticketing::TicketBroker") }
    refute_nil example, "README.md has no Ruby example with a Ticketing::TicketBroker"
    example
  end

  def test_the_readme_example_is_the_example_file
    example = seed_example
    assert_equal File.read(EXAMPLE), example
    assert_includes example, %(require "ticketing"\n)
    # nil (not granted within the wait) is handled before the ticket is used.
    assert_includes example, %(ticket = broker.acquire("seat-17", 5, 30, 2))
    assert_includes example, %(\nif ticket\n  begin\n)
    assert_includes example, "  ensure\n    ticket.release\n  end\n"
  end

  def test_seed_example_runs_and_releases
    code = %(ENV["TICKETING_ADDR"] = "#{server.addr}"\n) + seed_example
    status, out = TestHelper.run_ruby(code, timeout: 60)
    refute_nil status, "the example hung:\n#{out}"
    assert status.success?, "the example failed:\n#{out}"
    token = out[/holding seat-17 with token (\d+)/, 1]
    refute_nil token, out
    # Released: the key is free now, and the next grant's token is larger.
    info = server.lock_info("seat-17")
    assert_nil info["holder"], info.inspect
    ticket = broker.acquire("seat-17", 0, 10, 0)
    refute_nil ticket
    assert_operator ticket.token, :>, Integer(token)
    assert_equal true, ticket.release
  end

  def test_loaded_from_the_installed_gem
    spec = Gem.loaded_specs["ticketing"]
    refute_nil spec, "ticketing was not loaded as a gem"
    gem_home = ENV.fetch("GEM_HOME", nil)
    refute_nil gem_home
    assert spec.full_gem_path.start_with?(File.realpath(gem_home)) || spec.full_gem_path.start_with?(gem_home),
           spec.full_gem_path
    # The platform gem: lib/ticketing/<abi>/ticketing.so; the source gem: ticketing/ticketing.so.
    native = $LOADED_FEATURES.grep(%r{/ticketing/(\d+\.\d+/)?ticketing\.so\z})
    refute_empty native
    refute native.any? { |f| f.start_with?(File.expand_path("..", __dir__)) }, native.inspect
    assert_equal Ticketing::VERSION, Ticketing::NATIVE_VERSION
  end
end
