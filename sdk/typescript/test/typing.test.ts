// The typed events reject mistakes at compile time: tsc accepts
// test/typing/accepted.ts and rejects exactly the lines of
// test/typing/rejected.ts marked "rejected" (a misspelled event type, a
// misspelled field, a field of another type's data, ...).
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { expect, test } from "vitest";

const root = fileURLToPath(new URL("..", import.meta.url));

/** The lines of `file` (relative to the package) tsc reports errors on. */
function errorLines(file: string): number[] {
  const tsc = spawnSync(
    process.execPath,
    [
      "node_modules/typescript/bin/tsc",
      "--noEmit",
      "--strict",
      "--target",
      "ES2022",
      "--module",
      "NodeNext",
      "--moduleResolution",
      "NodeNext",
      "--skipLibCheck",
      "--types",
      "node",
      file,
    ],
    { cwd: root, encoding: "utf8" },
  );
  const lines = [...tsc.stdout.matchAll(/^(.+?)\((\d+),\d+\): error TS\d+/gm)].map((m) => {
    expect(m[1]).toBe(file);
    return Number(m[2]);
  });
  expect(tsc.status === 0, tsc.stdout).toBe(lines.length === 0);
  return lines;
}

test("tsc accepts the typed events used as their types say", { timeout: 120_000 }, () => {
  expect(errorLines("test/typing/accepted.ts")).toEqual([]);
});

test("tsc rejects a misspelled event type or field", { timeout: 120_000 }, () => {
  const marked = readFileSync(`${root}/test/typing/rejected.ts`, "utf8")
    .split("\n")
    .flatMap((line, i) => (line.includes("// rejected") ? [i + 1] : []));
  expect(marked.length).toBe(5);
  expect(errorLines("test/typing/rejected.ts")).toEqual(marked);
});
