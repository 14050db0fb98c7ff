// Stages the two npm packages of a release (scripts/release packs them):
//   node scripts/stage-release.js OUT_DIR PATH_OF_THE_COMPILED_MODULE
// OUT_DIR/ticketing: the package (JS, types, loader, README, LICENSE) with
//   `optionalDependencies` on every platform package of npm/ at this version;
// OUT_DIR/linux-x64-gnu: the platform package (npm/linux-x64-gnu/package.json)
//   with the compiled module as ticketing.linux-x64-gnu.node.
'use strict'
const fs = require('node:fs')
const path = require('node:path')

const [out, compiled] = process.argv.slice(2)
if (!out || !compiled) {
  console.error('usage: stage-release.js OUT_DIR COMPILED_MODULE')
  process.exit(2)
}
const here = path.join(__dirname, '..')
const license = path.join(here, '..', 'LICENSE')
const main = JSON.parse(fs.readFileSync(path.join(here, 'package.json'), 'utf8'))

fs.rmSync(out, { recursive: true, force: true })
const optional = {}
for (const dir of fs.readdirSync(path.join(here, 'npm')).sort()) {
  const pkg = JSON.parse(fs.readFileSync(path.join(here, 'npm', dir, 'package.json'), 'utf8'))
  if (pkg.version !== main.version) throw new Error(`npm/${dir}: version ${pkg.version}, the package ${main.version}`)
  if (pkg.name !== `${main.name}-${dir}`) throw new Error(`npm/${dir}: named ${pkg.name}, expected ${main.name}-${dir}`)
  optional[pkg.name] = pkg.version
  const dest = path.join(out, dir)
  fs.mkdirSync(dest, { recursive: true })
  for (const f of ['package.json', 'README.md']) fs.copyFileSync(path.join(here, 'npm', dir, f), path.join(dest, f))
  fs.copyFileSync(license, path.join(dest, 'LICENSE'))
  const node = pkg.main
  if (dir === 'linux-x64-gnu') fs.copyFileSync(compiled, path.join(dest, node))
  if (!fs.existsSync(path.join(dest, node))) throw new Error(`npm/${dir}: no compiled module for it`)
}

const dest = path.join(out, 'ticketing')
fs.mkdirSync(dest, { recursive: true })
for (const f of main.files) {
  const from = f === 'LICENSE' ? license : path.join(here, f)
  fs.copyFileSync(from, path.join(dest, f))
}
// What a user installs: no build scripts, no dev tools; the platform packages.
const shipped = { ...main, optionalDependencies: optional }
delete shipped.scripts
delete shipped.devDependencies
fs.writeFileSync(path.join(dest, 'package.json'), JSON.stringify(shipped, null, 2) + '\n')
console.log(`staged ${main.name}@${main.version} and ${Object.keys(optional).join(', ')} in ${out}`)
