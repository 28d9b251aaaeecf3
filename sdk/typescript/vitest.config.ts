import { fileURLToPath } from "node:url";
import { defineConfig } from "vitest/config";

export default defineConfig({
  // The examples import the package by name, as a user's code would.
  resolve: { alias: { "holdfast-sdk": fileURLToPath(new URL("./src/index.ts", import.meta.url)) } },
  test: { testTimeout: 60_000, hookTimeout: 120_000 },
});
