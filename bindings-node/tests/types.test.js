// TypeScript: the shipped index.d.ts type-checks the examples with
// `tsc --strict --noEmit`, rejects wrong uses, and the compiled example
// (with `await using`) runs against a server. The example imports
// "ticketing", i.e. the installed package and its types.
'use strict'
const test = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const path = require('node:path')
const { spawnSync } = require('node:child_process')
const { Server, runScript } = require('./helpers.js')

const PROJECT = path.resolve(__dirname, '..')
const TSC = process.env.TICKETING_TSC
const TYPE_ROOTS = process.env.TICKETING_TYPE_ROOTS

function tsc(name, files, extra = {}) {
  assert.ok(TSC && fs.existsSync(TSC), `tsc not found (TICKETING_TSC=${TSC}); run through run-tests.sh`)
  const dir = fs.mkdtempSync(path.join(PROJECT, `.tsc-${name}-`))
  const config = {
    compilerOptions: {
      strict: true,
      target: 'es2022',
      module: 'node16',
      moduleResolution: 'node16',
      lib: ['es2022', 'esnext.disposable'],
      types: ['node'],
      typeRoots: [TYPE_ROOTS],
      skipLibCheck: false,
      noEmit: true,
      ...extra,
    },
    files: files.map((f) => path.resolve(PROJECT, f)),
  }
  fs.writeFileSync(path.join(dir, 'tsconfig.json'), JSON.stringify(config, null, 2))
  const r = spawnSync(process.execPath, [TSC, '-p', dir], { encoding: 'utf8', timeout: 120000 })
  return { ...r, dir, out: `${r.stdout}${r.stderr}` }
}

test('tsc --strict --noEmit passes on examples/example.ts', () => {
  const r = tsc('ok', ['examples/example.ts'])
  assert.equal(r.status, 0, r.out)
})

test('tsc rejects wrong uses of the API (the types are not any)', () => {
  const bad = path.join(PROJECT, 'examples', 'bad-usage.ts')
  fs.writeFileSync(
    bad,
    `import { TicketBroker, BusyError } from 'ticketing'
export async function f(b: TicketBroker): Promise<void> {
  const t = await b.acquire('k', 1, 10)
  const n: number = t.token            // possibly null, and a bigint
  await b.acquire('k', '1', 10)        // seconds are numbers
  const code: 'CLOSED' = new BusyError('x').code
  await b.withLock('k', { wait: 1 }, async () => 1)   // lease is required
  new TicketBroker(['a:1'], { tls: 1 })
  await b.acquireShared('k', '2', 1, 10)                  // n is a number
  const slot: number = t!.slot                            // possibly null
  t!.keys.push('x')                                       // keys are read-only
  await b.acquireAll('a', 1, 10)                          // keys is an array
  await b.withReadLock('k', { lease: 5 }, () => 1)        // wait is required
  await b.withSharedLock('k', { wait: 1, lease: 5 }, () => 1) // n is required
  void n; void code; void slot
}
`,
  )
  const r = tsc('bad', ['examples/bad-usage.ts'])
  assert.notEqual(r.status, 0)
  for (const line of [4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14]) assert.match(r.out, new RegExp(`bad-usage\\.ts\\(${line},`), `no error on line ${line}:\n${r.out}`)
})

test('the ES module types (index.d.mts) declare the default export and the named ones', () => {
  const file = path.join(PROJECT, 'examples', 'esm-types.mts')
  fs.writeFileSync(
    file,
    `import ticketing, { TicketBroker, TicketingError, version } from 'ticketing'
export const same: typeof TicketBroker = ticketing.TicketBroker
export const v: string = ticketing.version + version
export const isError = (e: unknown): boolean => e instanceof TicketingError
export const wrong: number = ticketing.version
`,
  )
  const r = tsc('esm', ['examples/esm-types.mts'])
  // Everything resolves (no "has no default export", no implicit any); the one
  // error is the deliberate one on line 5, so the types are not any.
  assert.notEqual(r.status, 0, r.out)
  const errors = r.out.split('\n').filter((l) => /error TS/.test(l))
  assert.equal(errors.length, 1, r.out)
  assert.match(errors[0], /esm-types\.mts\(5,/, r.out)
})

test('the compiled example (await using, withLock, signal) runs against a server', async () => {
  const c = tsc('emit', ['examples/example.ts'], { noEmit: false, outDir: undefined })
  assert.equal(c.status, 0, c.out)
  const out = path.join(PROJECT, 'examples', 'example.js')
  assert.ok(fs.existsSync(out), 'tsc emitted examples/example.js')
  const srv = await Server.start()
  try {
    const r = await runScript(
      `require(${JSON.stringify(out)}).main(process.argv[2]).then((t) => console.log('token', typeof t, t > 0n))`,
      { args: [srv.addr], ms: 60000 },
    )
    assert.equal(r.code, 0, r.stderr)
    assert.match(r.stdout, /token bigint true/)
    assert.match(r.stdout, /^seat:43 \d+n false$/m)
    // Everything the example acquired was released (await using / withLock).
    assert.equal((await srv.lock('seat:42')).holder, null)
    assert.equal((await srv.lock('seat:43')).holder, null)
    // The counted and multi-key part of the example ran and released.
    assert.match(r.stdout, /^slot 0$/m)
    assert.match(r.stdout, /^seat:45\+seat:46 \d+n$/m)
    for (const k of ['pool:db', 'seat:45', 'seat:46', 'doc:1']) assert.equal((await srv.lock(k)).holder, null, k)
  } finally {
    await srv.stop()
  }
})

test('examples/example.mjs (the README example) runs', async () => {
  const srv = await Server.start()
  try {
    const r = spawnSync(process.execPath, [path.join(PROJECT, 'examples', 'example.mjs'), srv.addr], {
      encoding: 'utf8',
      timeout: 60000,
      cwd: PROJECT,
    })
    assert.equal(r.status, 0, r.stderr)
    assert.match(r.stdout, /^seat:42 token \d+$/m)
  } finally {
    await srv.stop()
  }
})
