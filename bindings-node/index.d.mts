// Types of the ES module entry (index.mjs): the same named exports as the
// CommonJS entry, plus its default export (the whole module object).
/// <reference types="node" />
import * as ticketing from './index.js'

export * from './index.js'
export default ticketing
