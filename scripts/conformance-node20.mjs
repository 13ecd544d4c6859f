// Node 20 compatibility shim for @modelcontextprotocol/conformance.
//
// The suite's bundled dist does `import { globSync } from "fs"`, an export
// that only exists in Node >= 22. It is used only by the `tier-check`
// command, but a missing named export fails module linking, so no command
// runs at all on Node 20.
//
// Usage:  node --import ./scripts/conformance-node20.mjs <suite bin> server ...
//
// This one file plays two roles:
//   * Imported via --import (main thread): it registers itself, with a
//     "?hooks" query, as a customization hook module via module.register.
//     (Patching `fs` from a plain preload does not help: named ESM exports
//     of builtins are fixed when the builtin is first linked.)
//   * Loaded as hooks (hooks thread): resolve() redirects "fs"/"node:fs"
//     to a synthetic module that re-exports the real fs and adds a stub
//     globSync that throws a clear error if it is ever called.
// On a Node that already has fs.globSync, nothing is redirected.

import * as realFs from "node:fs";
import { register } from "node:module";

const SHIM_URL = "manifold-conformance-shim:fs";
const isHooksInstance = new URL(import.meta.url).searchParams.has("hooks");
const needShim = typeof realFs.globSync !== "function";

if (!isHooksInstance && needShim) {
  const self = new URL(import.meta.url);
  self.searchParams.set("hooks", "1");
  register(self.href);
}

export async function resolve(specifier, context, nextResolve) {
  if (
    needShim &&
    (specifier === "fs" || specifier === "node:fs") &&
    context.parentURL !== SHIM_URL
  ) {
    return { url: SHIM_URL, shortCircuit: true };
  }
  return nextResolve(specifier, context);
}

export async function load(url, context, nextLoad) {
  if (url === SHIM_URL) {
    const source = `
import fs from "node:fs";
export * from "node:fs";
export default fs;
export function globSync() {
  throw new Error(
    "fs.globSync is not available on Node " + process.versions.node +
    " (needs Node >= 22); this conformance command is unsupported here " +
    "(see scripts/conformance-node20.mjs)");
}
`;
    return { format: "module", source, shortCircuit: true };
  }
  return nextLoad(url, context);
}
