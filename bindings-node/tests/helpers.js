// Test helpers: real ticketing-server processes on loopback (standalone and
// a 3-node cluster), the admin HTTP API, bounded waits, child scripts.
//
// The server binary is $TICKETING_SERVER_BIN, by default
// <repo>/target/debug/ticketing-server. The tests run from a temporary
// project where the packed tarball was installed (run-tests.sh), so
// require('ticketing') is the installed package; $TICKETING_REPO points at
// the repository for the binary's default path.
'use strict'

const { spawn, spawnSync } = require('node:child_process')
const fs = require('node:fs')
const http = require('node:http')
const net = require('node:net')
const os = require('node:os')
const path = require('node:path')
const crypto = require('node:crypto')

const REPO = process.env.TICKETING_REPO || path.resolve(__dirname, '..', '..')

function serverBin() {
  const bin = process.env.TICKETING_SERVER_BIN || path.join(REPO, 'target', 'debug', 'ticketing-server')
  if (!fs.existsSync(bin)) {
    throw new Error(`server binary ${bin} not found: cargo build -p ticketing-server, or set TICKETING_SERVER_BIN`)
  }
  return bin
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

/** Polls `check` (async, truthy = done) every `every` ms for at most `ms`. */
async function within(ms, check, what, every = 50) {
  const end = Date.now() + ms
  for (;;) {
    const v = await check()
    if (v) return v
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${what}`)
    await sleep(every)
  }
}

/** A free loopback port below the ephemeral range (see ticketing-server's cluster tests). */
async function freePort() {
  for (let i = 0; i < 200; i++) {
    const port = 20000 + crypto.randomInt(12000)
    const ok = await new Promise((resolve) => {
      const s = net.createServer()
      s.once('error', () => resolve(false))
      s.listen(port, '127.0.0.1', () => s.close(() => resolve(true)))
    })
    if (ok) return port
  }
  throw new Error('no free port found')
}

function serverEnv(extra) {
  const env = {}
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('TICKETING_')) env[k] = v
  env.RUST_LOG = env.RUST_LOG || 'warn'
  return Object.assign(env, extra || {})
}

/** GET http://addr/path → { status, body (parsed JSON or text) }, or null on a connection error. */
function adminGet(addr, urlPath) {
  const [host, port] = splitAddr(addr)
  return new Promise((resolve) => {
    const req = http.get({ host, port, path: urlPath, timeout: 2000 }, (res) => {
      let data = ''
      res.setEncoding('utf8')
      res.on('data', (c) => (data += c))
      res.on('end', () => {
        let body = data
        try {
          body = JSON.parse(data)
        } catch {}
        resolve({ status: res.statusCode, body })
      })
    })
    req.on('timeout', () => req.destroy(new Error('timeout')))
    req.on('error', () => resolve(null))
  })
}

function splitAddr(addr) {
  const i = addr.lastIndexOf(':')
  return [addr.slice(0, i), Number(addr.slice(i + 1))]
}

/** A standalone server: `addr` (client port) and `admin` (admin HTTP port). */
class Server {
  static async start(args = [], env = {}) {
    const admin = `127.0.0.1:${await freePort()}`
    const proc = spawn(serverBin(), ['--listen', '127.0.0.1:0', '--admin-listen', admin, ...args], {
      env: serverEnv(env),
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    const srv = new Server(proc, admin)
    srv.addr = await new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`server did not start:\n${srv.output}`)), 20000)
      proc.stdout.on('data', () => {
        const m = /listening on (\S+)/.exec(srv.output)
        if (m) {
          clearTimeout(timer)
          resolve(m[1])
        }
      })
      proc.once('exit', (code) => {
        clearTimeout(timer)
        reject(new Error(`server exited with ${code}:\n${srv.output}`))
      })
    })
    await within(10000, async () => (await adminGet(admin, '/healthz')) !== null, 'the admin port')
    return srv
  }

  constructor(proc, admin) {
    this.proc = proc
    this.admin = admin
    this.output = ''
    const keep = (c) => {
      this.output = (this.output + c.toString()).slice(-8000)
    }
    proc.stdout.on('data', keep)
    proc.stderr.on('data', keep)
  }

  /** The admin view of a key: { holder, waiters } (waiters: a list in FIFO order). */
  async lock(key) {
    const res = await adminGet(this.admin, `/locks/${encodeURIComponent(key)}`)
    if (!res || res.status !== 200) throw new Error(`admin /locks/${key}: ${JSON.stringify(res)}`)
    return res.body
  }

  /** Waits until `key` has exactly `n` waiters queued. */
  async waiters(key, n, ms = 20000) {
    await within(ms, async () => (await this.lock(key)).waiters.length === n, `${n} waiters on ${key}`, 20)
  }

  async stop() {
    await stopProc(this.proc)
  }
}

async function stopProc(proc, signal = 'SIGTERM') {
  if (proc.exitCode !== null || proc.signalCode !== null) return
  const exited = new Promise((resolve) => proc.once('exit', resolve))
  proc.kill(signal)
  const t = setTimeout(() => proc.kill('SIGKILL'), 5000)
  await exited
  clearTimeout(t)
}

/** A 3-node cluster of real processes (bootstrap on node 0). */
class Cluster {
  static async start() {
    const c = new Cluster()
    for (let i = 0; i < 3; i++) {
      c.client.push(`127.0.0.1:${await freePort()}`)
      c.peer.push(`127.0.0.1:${await freePort()}`)
      c.admin.push(`127.0.0.1:${await freePort()}`)
    }
    const env = serverEnv({ TICKETING_PEER_TOKEN: 'node-test-peer-token' })
    for (let i = 0; i < 3; i++) {
      const args = ['--listen', c.client[i], '--peer-listen', c.peer[i], '--peers', c.peer.join(','),
        '--admin-listen', c.admin[i]]
      if (i === 0) args.push('--bootstrap')
      const proc = spawn(serverBin(), args, { env, stdio: ['ignore', 'pipe', 'pipe'] })
      const out = { text: '' }
      const keep = (d) => (out.text = (out.text + d.toString()).slice(-4000))
      proc.stdout.on('data', keep)
      proc.stderr.on('data', keep)
      c.procs.push(proc)
      c.outs.push(out)
      // The bootstrap node is up before the others start (it retries until every peer is reachable).
      if (i === 0) await within(10000, async () => (await adminGet(c.admin[0], '/healthz'))?.status === 200, 'node 0 up')
    }
    return c
  }

  constructor() {
    this.client = []
    this.peer = []
    this.admin = []
    this.procs = []
    this.outs = []
  }

  /** Index of the serving leader, waiting up to `ms`. */
  async leader(ms) {
    return within(ms, async () => {
      for (let i = 0; i < 3; i++) {
        if (this.procs[i].exitCode !== null || this.procs[i].signalCode !== null) continue
        const res = await adminGet(this.admin[i], '/status')
        if (res && res.status === 200 && res.body.serving === true) return { i }
      }
      return null
    }, 'a serving leader', 200).then((r) => r.i)
  }

  output() {
    return this.outs.map((o, i) => `--- node ${i}\n${o.text}`).join('\n')
  }

  async stop() {
    await Promise.all(this.procs.map((p) => stopProc(p, 'SIGKILL')))
  }
}

/** A unique key per test. */
function key(prefix = 'k') {
  return `${prefix}-${crypto.randomBytes(6).toString('hex')}`
}

/**
 * Runs `source` as a CommonJS script in a child node (cwd: this directory,
 * so it resolves the installed package), bounded by `ms`. Resolves to
 * { code, signal, stdout, stderr, ms }.
 */
function runScript(source, { args = [], nodeArgs = [], ms = 30000 } = {}) {
  const file = path.join(__dirname, `.child-${process.pid}-${crypto.randomBytes(4).toString('hex')}.js`)
  fs.writeFileSync(file, source)
  const t0 = Date.now()
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [...nodeArgs, file, ...args], { cwd: __dirname, stdio: ['ignore', 'pipe', 'pipe'] })
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (d) => (stdout += d))
    child.stderr.on('data', (d) => (stderr += d))
    const timer = setTimeout(() => child.kill('SIGKILL'), ms)
    child.on('exit', (code, signal) => {
      clearTimeout(timer)
      fs.rmSync(file, { force: true })
      resolve({ code, signal, stdout, stderr, ms: Date.now() - t0 })
    })
  })
}

/** A loopback port with nothing listening (connections are refused). */
async function deadAddr() {
  return `127.0.0.1:${await freePort()}`
}

module.exports = { Server, Cluster, within, sleep, key, runScript, deadAddr, adminGet, freePort, REPO, spawnSync, os, serverBin }
