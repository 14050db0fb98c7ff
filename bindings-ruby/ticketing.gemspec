# frozen_string_literal: true

# The source gem is built by `rake gem` (Rakefile), which stages this
# directory with the Rust crates it needs vendored; `gem build` on the
# repository directory itself would miss them.
require_relative "lib/ticketing/version"

Gem::Specification.new do |spec|
  spec.name = "ticketing"
  spec.version = Ticketing::VERSION
  spec.summary = "Client for Ticketing, a distributed FIFO lock service with fencing tokens"
  spec.description = <<~DESC
    Ticketing::TicketBroker acquires FIFO locks with fencing tokens from a
    Ticketing server or Raft cluster. A thin Ruby layer over the Rust client
    (magnus); the native extension is built with cargo at install time.
  DESC
  spec.authors = ["Ticketing developers"]
  spec.license = "Apache-2.0"
  spec.required_ruby_version = ">= 3.0"
  spec.requirements = ["a Rust toolchain (cargo, rustc >= 1.80)", "Ruby headers (ruby-dev)", "libclang (bindgen)"]
  spec.files = Dir.chdir(__dir__) do
    Dir.glob(%w[README.md Cargo.toml Cargo.lock ticketing.gemspec lib/**/*.rb sig/**/*.rbs ext/**/extconf.rb
                src/**/*.rs vendor/**/*], File::FNM_DOTMATCH).select { |f| File.file?(f) }.sort
  end
  spec.extensions = ["ext/ticketing/extconf.rb"]
  spec.require_paths = ["lib"]
end
