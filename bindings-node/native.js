// The compiled module for this platform (built by `npm run build`; the
// tarball from `npm pack` carries the one for the machine that built it).
'use strict'
module.exports = require('./ticketing.node')
