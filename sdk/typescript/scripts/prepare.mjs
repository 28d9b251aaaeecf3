// `npm install ./sdk/typescript` (a link to this folder) runs `prepare` here
// without this package's dev dependencies: install them from the lockfile
// first (without scripts, or this would run again), then build dist/.
import { execSync } from "node:child_process";
import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("..", import.meta.url));
const run = (command) => execSync(command, { cwd: root, stdio: "inherit" });
if (!existsSync(new URL("../node_modules/typescript/package.json", import.meta.url))) {
  run("npm ci --ignore-scripts --no-audit --no-fund --loglevel=error");
}
run("npm run build");
