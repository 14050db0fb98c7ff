// Loads the compiled module for this platform, napi-rs style:
// 1. a module built in this directory (`npm run build`: ticketing.node, a
//    build from source), else
// 2. the platform package `ticketing-<platform>-<arch>[-<abi>]` that npm
//    installs as an optional dependency of `ticketing` where it fits
//    (os/cpu/libc in its package.json).
// With neither, the error names the platform and the package looked for.
'use strict'
const { existsSync } = require('node:fs')
const { join } = require('node:path')

// The platform packages published with this version (docs/node.md, "Platforms").
const PREBUILT = ['linux-x64-gnu']

function isMusl() {
  if (process.platform !== 'linux') return false
  try {
    const report = typeof process.report?.getReport === 'function' ? process.report.getReport() : null
    const header = report && (typeof report === 'string' ? JSON.parse(report) : report).header
    if (header && header.glibcVersionRuntime) return false
    if (report && Array.isArray(report.sharedObjects)) {
      return report.sharedObjects.some((f) => f.includes('libc.musl-') || f.includes('ld-musl-'))
    }
  } catch {
    // fall through: assume glibc unless musl's loader is present
  }
  return existsSync('/lib/ld-musl-x86_64.so.1') || existsSync('/lib/ld-musl-aarch64.so.1')
}

/** The napi-rs platform name of this process: `linux-x64-gnu`, `darwin-arm64`, `win32-x64-msvc`, … */
function platformName() {
  const { platform, arch } = process
  if (platform === 'linux') return `${platform}-${arch}-${isMusl() ? 'musl' : 'gnu'}`
  if (platform === 'win32') return `${platform}-${arch}-msvc`
  return `${platform}-${arch}`
}

function load() {
  const local = join(__dirname, 'ticketing.node')
  if (existsSync(local)) return require(local)
  const name = platformName()
  const pkg = `ticketing-${name}`
  let cause
  try {
    return require(pkg)
  } catch (e) {
    cause = e
  }
  const notFound = cause && cause.code === 'MODULE_NOT_FOUND' && String(cause.message).includes(pkg)
  const why = notFound
    ? PREBUILT.includes(name)
      ? `the package ${pkg} is not installed (npm skips optional dependencies with --omit=optional or --no-optional; reinstall without it)`
      : `no prebuilt package exists for ${name} (prebuilt: ${PREBUILT.join(', ')})`
    : `${pkg} failed to load: ${cause && cause.message}`
  const err = new Error(
    `ticketing: no native module for this platform (${name}): looked for the package ${pkg}: ${why}. ` +
      'Elsewhere, build it from source: https://github.com/ticketing-rs/ticketing/blob/main/docs/node.md#building-from-source',
    { cause },
  )
  err.code = 'TICKETING_NO_NATIVE_MODULE'
  err.platform = name
  err.package = pkg
  throw err
}

module.exports = load()
