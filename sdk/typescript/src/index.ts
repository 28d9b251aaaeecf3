export * from "./client.js";
export * from "./errors.js";
export * from "./tools.js";
export * from "./webhooks.js";
export type { components, paths } from "./schema.js";
