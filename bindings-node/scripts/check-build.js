// After `napi build`: the package must hold the compiled module and its
// generated types, or `npm pack` would ship a tarball that cannot load.
'use strict'
const fs = require('node:fs')
const path = require('node:path')
const root = path.join(__dirname, '..')
for (const f of ['ticketing.node', 'native.d.ts']) {
  if (!fs.existsSync(path.join(root, f))) {
    console.error(`build: ${f} is missing after napi build`)
    process.exit(1)
  }
}
require(path.join(root, 'native.js'))
