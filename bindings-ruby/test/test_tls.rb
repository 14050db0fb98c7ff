# frozen_string_literal: true

require_relative "helper"
require "fileutils"
require "openssl"
require "tmpdir"

# The `tls:` option against a server with TLS on its client port: a CA file
# verifies it, "insecure-skip-verify" skips verification, and a client
# without TLS (or with the wrong CA) never gets a connection.
class TestTls < Minitest::Test
  def self.pki
    @pki ||= begin
      dir = Dir.mktmpdir("ticketing-tls")
      ca_key = OpenSSL::PKey::EC.generate("prime256v1")
      ca = cert(ca_key, ca_key, "/CN=ticketing-test-ca", nil, ca: true)
      leaf_key = OpenSSL::PKey::EC.generate("prime256v1")
      leaf = cert(leaf_key, ca_key, "/CN=127.0.0.1", ca, ca: false)
      other_key = OpenSSL::PKey::EC.generate("prime256v1")
      other = cert(other_key, other_key, "/CN=other-ca", nil, ca: true)
      files = { dir: dir, ca: File.join(dir, "ca.pem"), other_ca: File.join(dir, "other.pem"),
                cert: File.join(dir, "cert.pem"), key: File.join(dir, "key.pem") }
      File.write(files[:ca], ca.to_pem)
      File.write(files[:other_ca], other.to_pem)
      File.write(files[:cert], leaf.to_pem)
      File.write(files[:key], leaf_key.private_to_pem)
      Minitest.after_run { FileUtils.rm_rf(dir) }
      files
    end
  end

  def self.cert(key, signer, subject, issuer, ca:)
    c = OpenSSL::X509::Certificate.new
    c.version = 2
    c.serial = rand(1..2**62)
    c.subject = OpenSSL::X509::Name.parse(subject)
    c.issuer = issuer ? issuer.subject : c.subject
    c.public_key = key
    c.not_before = Time.now - 3600
    c.not_after = Time.now + 24 * 3600
    ef = OpenSSL::X509::ExtensionFactory.new
    ef.subject_certificate = c
    ef.issuer_certificate = issuer || c
    if ca
      c.add_extension(ef.create_extension("basicConstraints", "CA:TRUE", true))
      c.add_extension(ef.create_extension("keyUsage", "keyCertSign,cRLSign", true))
    else
      c.add_extension(ef.create_extension("basicConstraints", "CA:FALSE", true))
      c.add_extension(ef.create_extension("subjectAltName", "IP:127.0.0.1", false))
      c.add_extension(ef.create_extension("extendedKeyUsage", "serverAuth", false))
    end
    c.sign(signer, OpenSSL::Digest.new("SHA256"))
    c
  end

  def self.server
    @server ||= begin
      srv = TestServer.new(args: ["--tls-cert", pki[:cert], "--tls-key", pki[:key]])
      Minitest.after_run { srv.stop }
      srv
    end
  end

  def with_broker(tls)
    b = Ticketing::TicketBroker.new([self.class.server.addr], tls: tls)
    yield b
  ensure
    b&.close
  end

  def test_ca_file_verifies_the_server
    with_broker(self.class.pki[:ca]) do |b|
      assert b.wait_ready(10)
      t = b.acquire(TestHelper.unique_key, 5, 10, 0)
      refute_nil t
      assert_equal true, t.release
    end
  end

  def test_insecure_skip_verify_connects
    with_broker("insecure-skip-verify") do |b|
      assert b.wait_ready(10)
      t = b.acquire(TestHelper.unique_key, 5, 10, 0)
      assert_equal true, t.release
    end
  end

  def test_wrong_ca_and_plain_tcp_never_connect
    [self.class.pki[:other_ca], "off"].each do |tls|
      with_broker(tls) do |b|
        assert_equal false, b.wait_ready(1), "tls: #{tls}"
        assert_raises(Ticketing::UnavailableError) do
          b.acquire(TestHelper.unique_key, 1, 10, 0)
        end
      end
    end
  end
end

# `tls_client_cert:` / `tls_client_key:` against a server that requires
# client certificates (`--tls-client-ca`); certificates from
# `ticketing-server gen-certs`.
class TestClientCertificates < Minitest::Test
  def test_client_certificate_is_presented_and_required
    Dir.mktmpdir("ticketing-mtls") do |dir|
      out = IO.popen([TestHelper.server_bin, "gen-certs", "--dir", dir, "--nodes", "1"], err: %i[child out], &:read)
      assert $?.success?, out
      srv = TestServer.new(args: ["--tls-cert", File.join(dir, "node1.pem"), "--tls-key",
                                  File.join(dir, "node1-key.pem"), "--tls-client-ca", File.join(dir, "ca.pem")])
      begin
        ca = File.join(dir, "ca.pem")
        b = Ticketing::TicketBroker.new([srv.addr], tls: ca, tls_client_cert: File.join(dir, "client.pem"),
                                                    tls_client_key: File.join(dir, "client-key.pem"))
        assert b.wait_ready(10)
        t = b.acquire(TestHelper.unique_key, 1, 10, 0)
        assert_equal true, t.release
        b.close
        without = Ticketing::TicketBroker.new([srv.addr], tls: ca)
        assert_equal false, without.wait_ready(1)
        assert_raises(Ticketing::UnavailableError) { without.acquire(TestHelper.unique_key, 0, 10, 0) }
        without.close
        e = assert_raises(ArgumentError) do
          Ticketing::TicketBroker.new([srv.addr], tls: ca, tls_client_cert: File.join(dir, "client.pem"))
        end
        assert_match(/together/, e.message)
        assert_raises(TypeError) { Ticketing::TicketBroker.new([srv.addr], tls: ca, tls_client_cert: 1) }
      ensure
        srv.stop
      end
    end
  end
end
