// Builds the dashboard into ../dist, which the Go package embeds: the sources
// in src/ as they are, and uPlot's browser build from node_modules (installed
// by `npm ci` from package-lock.json, so every build copies the same bytes).
// Run `make dashboard` from the repository root.
import { copyFileSync, mkdirSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const dist = join(here, "..", "dist");
const lock = JSON.parse(readFileSync(join(here, "package-lock.json"), "utf8"));
const want = lock.packages["node_modules/uplot"].version;
const got = JSON.parse(readFileSync(join(here, "node_modules", "uplot", "package.json"), "utf8")).version;
if (got !== want) {
  throw new Error(`node_modules has uplot ${got}, the lockfile ${want}: run npm ci`);
}
rmSync(dist, { recursive: true, force: true });
mkdirSync(dist);
for (const f of readdirSync(join(here, "src"))) {
  copyFileSync(join(here, "src", f), join(dist, f));
}
const up = join(here, "node_modules", "uplot");
copyFileSync(join(up, "dist", "uPlot.iife.min.js"), join(dist, "uPlot.iife.min.js"));
copyFileSync(join(up, "dist", "uPlot.min.css"), join(dist, "uPlot.min.css"));
copyFileSync(join(up, "LICENSE"), join(dist, "uPlot.LICENSE"));
console.log(`dashboard built into ${dist} with uPlot ${want}`);
