# frozen_string_literal: true

module Ticketing
  # The gem's version; the same as the Rust workspace's (checked by `rake gem`).
  VERSION = "0.1.0"
end
