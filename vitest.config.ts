import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts", "src/**/*.test.ts"],
    // End-to-end tests start real servers and child processes.
    testTimeout: 60_000,
    hookTimeout: 60_000,
    // Two cores: two test files at a time keeps child-process tests from starving each other.
    maxWorkers: 2,
  },
});
