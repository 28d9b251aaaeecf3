// dist/cjs is CommonJS inside a package whose "type" is "module": a
// package.json there tells Node so for the files under it.
import { writeFileSync } from "node:fs";

writeFileSync(new URL("../dist/cjs/package.json", import.meta.url), JSON.stringify({ type: "commonjs" }) + "\n");
