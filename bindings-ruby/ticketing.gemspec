# frozen_string_literal: true

# The source gem is built by `rake gem` (Rakefile), which stages this
# directory with the Rust crates it needs vendored; `gem build` on the
# repository directory itself would miss them. `rake native_gem` builds the
# platform gem from the same specification (the extension precompiled, no
# extconf.rb, required_ruby_version limited to the ABI it carries).
require_relative "lib/ticketing/version"

Gem::Specification.new do |spec|
  spec.name = "ticketing"
  spec.version = Ticketing::VERSION
  spec.summary = "Client for Ticketing, a distributed FIFO lock service with fencing tokens"
  spec.description = <<~DESC
    Ticketing::TicketBroker acquires FIFO locks with fencing tokens from a
    Ticketing server or Raft cluster. A thin Ruby layer over the Rust client
    (magnus). The platform gem (x86_64-linux) carries the compiled extension;
    the source gem builds it with cargo at install time.
  DESC
  spec.authors = ["Ticketing developers"]
  spec.license = "Apache-2.0"
  spec.homepage = "https://github.com/ticketing-rs/ticketing"
  spec.metadata = {
    "homepage_uri" => spec.homepage,
    "source_code_uri" => "https://github.com/ticketing-rs/ticketing/tree/main/bindings-ruby",
    "documentation_uri" => "https://github.com/ticketing-rs/ticketing/blob/main/docs/ruby.md",
    "changelog_uri" => "https://github.com/ticketing-rs/ticketing/blob/main/CHANGELOG.md",
    "bug_tracker_uri" => "https://github.com/ticketing-rs/ticketing/issues",
    "rubygems_mfa_required" => "true"
  }
  spec.required_ruby_version = ">= 3.0"
  spec.requirements = ["a Rust toolchain (cargo, rustc >= 1.88)", "Ruby headers (ruby-dev)", "libclang (bindgen)"]
  spec.files = Dir.chdir(__dir__) do
    Dir.glob(%w[README.md LICENSE Cargo.toml Cargo.lock ticketing.gemspec lib/**/*.rb sig/**/*.rbs ext/**/extconf.rb
                src/**/*.rs vendor/**/*], File::FNM_DOTMATCH).select { |f| File.file?(f) }.sort
  end
  spec.extensions = ["ext/ticketing/extconf.rb"]
  spec.require_paths = ["lib"]
end
