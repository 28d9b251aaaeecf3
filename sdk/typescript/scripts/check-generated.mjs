// src/schema.ts is what `npm run generate` makes of ../openapi.json today:
// run that command into a temporary file and compare.
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";

const dir = mkdtempSync(path.join(tmpdir(), "holdfast-schema-"));
try {
  const fresh = path.join(dir, "schema.ts");
  const generate = JSON.parse(readFileSync("package.json", "utf8")).scripts.generate;
  const [command, ...args] = generate.replace("-o src/schema.ts", `-o ${fresh}`).split(" ");
  execFileSync("npx", [command, ...args], { stdio: ["ignore", "ignore", "inherit"] });
  if (readFileSync(fresh, "utf8") !== readFileSync("src/schema.ts", "utf8")) {
    console.error("src/schema.ts does not match ../openapi.json: run `npm run generate` (or sdk/regenerate)");
    process.exit(1);
  }
  console.log("src/schema.ts matches ../openapi.json");
} finally {
  rmSync(dir, { recursive: true, force: true });
}
