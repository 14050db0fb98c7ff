// Client certificates (mutual TLS): the tlsClientCert / tlsClientKey options
// against a server started with --tls-client-ca; certificates from
// `ticketing-server gen-certs`.
'use strict'
const test = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const path = require('node:path')
const { TicketBroker, UnavailableError } = require('ticketing')
const { Server, key, spawnSync, os, serverBin } = require('./helpers.js')

test('a client certificate is presented to a server that requires one; without it no connection', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ticketing-mtls-'))
  const gen = spawnSync(serverBin(), ['gen-certs', '--dir', dir, '--nodes', '1'], { encoding: 'utf8', timeout: 60000 })
  assert.equal(gen.status, 0, gen.stderr)
  const f = (name) => path.join(dir, name)
  const srv = await Server.start(['--tls-cert', f('node1.pem'), '--tls-key', f('node1-key.pem'), '--tls-client-ca', f('ca.pem')])
  try {
    const b = new TicketBroker([srv.addr], { tls: f('ca.pem'), tlsClientCert: f('client.pem'), tlsClientKey: f('client-key.pem') })
    try {
      assert.equal(await b.waitReady(10), true)
      const t = await b.acquire(key(), 1, 10, 0)
      assert.equal(await t.release(), true)
    } finally {
      await b.close()
    }
    const without = new TicketBroker([srv.addr], { tls: f('ca.pem') })
    try {
      assert.equal(await without.waitReady(1), false)
      await assert.rejects(without.acquire(key(), 0, 10, 0), UnavailableError)
    } finally {
      await without.close()
    }
    assert.throws(() => new TicketBroker([srv.addr], { tls: f('ca.pem'), tlsClientCert: f('client.pem') }), RangeError)
    assert.throws(() => new TicketBroker([srv.addr], { tls: f('ca.pem'), tlsClientKey: 1 }), TypeError)
  } finally {
    await srv.stop()
    fs.rmSync(dir, { recursive: true, force: true })
  }
})
