// The loader (native.js) of the installed package: here it loads the module
// of the platform package; on a platform without one, its error names the
// platform and the package it looked for.
'use strict'
const test = require('node:test')
const assert = require('node:assert/strict')
const path = require('node:path')

const PKG_DIR = path.dirname(require.resolve('ticketing/package.json'))
const LOADER = path.join(PKG_DIR, 'native.js')

function withPlatform(platform, arch, f) {
  const saved = {
    platform: Object.getOwnPropertyDescriptor(process, 'platform'),
    arch: Object.getOwnPropertyDescriptor(process, 'arch'),
  }
  Object.defineProperty(process, 'platform', { value: platform, configurable: true, enumerable: true })
  Object.defineProperty(process, 'arch', { value: arch, configurable: true, enumerable: true })
  delete require.cache[LOADER]
  try {
    return f()
  } finally {
    Object.defineProperty(process, 'platform', saved.platform)
    Object.defineProperty(process, 'arch', saved.arch)
    delete require.cache[LOADER]
  }
}

test('the installed package ships no compiled module of its own', () => {
  const files = require('node:fs').readdirSync(PKG_DIR)
  assert.deepEqual(files.filter((f) => f.endsWith('.node')), [])
})

test('on Linux x64 (glibc) the module comes from ticketing-linux-x64-gnu', { skip: !(process.platform === 'linux' && process.arch === 'x64') }, () => {
  require('ticketing')
  const loaded = Object.keys(require.cache).filter((f) => f.endsWith('.node'))
  assert.ok(
    loaded.some((f) => f.includes(`${path.sep}ticketing-linux-x64-gnu${path.sep}ticketing.linux-x64-gnu.node`)),
    loaded.join('\n'),
  )
})

test('on a platform with no prebuilt package, the error names the platform and the package', () => {
  withPlatform('freebsd', 'arm64', () => {
    assert.throws(
      () => require(LOADER),
      (e) => {
        assert.equal(e.code, 'TICKETING_NO_NATIVE_MODULE')
        assert.equal(e.platform, 'freebsd-arm64')
        assert.equal(e.package, 'ticketing-freebsd-arm64')
        assert.match(e.message, /\(freebsd-arm64\)/)
        assert.match(e.message, /looked for the package ticketing-freebsd-arm64/)
        assert.match(e.message, /prebuilt: linux-x64-gnu/)
        return true
      },
    )
  })
})

test('Windows and macOS names follow napi-rs (win32-x64-msvc, darwin-arm64)', () => {
  for (const [platform, arch, name] of [
    ['win32', 'x64', 'win32-x64-msvc'],
    ['darwin', 'arm64', 'darwin-arm64'],
  ]) {
    withPlatform(platform, arch, () => {
      assert.throws(() => require(LOADER), (e) => e.platform === name && e.package === `ticketing-${name}`)
    })
  }
})
