# frozen_string_literal: true

require_relative "helper"
require "rbs"

# sig/ticketing.rbs (shipped in the gem) matches the loaded library: every
# declared method exists, and every public method is declared.
class TestSignatures < Minitest::Test
  def signature
    path = File.join(Gem.loaded_specs.fetch("ticketing").full_gem_path, "sig", "ticketing.rbs")
    RBS::Parser.parse_signature(File.read(path))
  end

  def declared
    methods = Hash.new { |h, k| h[k] = { instance: [], singleton: [] } }
    signature.each do |mod|
      mod.members.each do |member|
        next unless member.is_a?(RBS::AST::Declarations::Class)

        cls = Ticketing.const_get(member.name.name)
        member.members.each do |m|
          case m
          when RBS::AST::Members::MethodDefinition
            methods[cls][m.kind == :singleton ? :singleton : :instance] << m.name
          when RBS::AST::Members::AttrReader
            methods[cls][:instance] << m.name
          end
        end
      end
    end
    methods
  end

  def test_declared_methods_exist_and_public_methods_are_declared
    decl = declared
    [Ticketing::TicketBroker, Ticketing::Ticket].each do |cls|
      assert_equal cls.public_instance_methods(false).sort, decl[cls][:instance].sort, "#{cls} instance methods"
      decl[cls][:singleton].each { |m| assert cls.respond_to?(m), "#{cls}.#{m}" }
    end
    assert_equal %i[connect new], decl[Ticketing::TicketBroker][:singleton].sort
    assert_equal %i[code], decl[Ticketing::Error][:instance]
  end
end
