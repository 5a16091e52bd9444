import type { StatsFs } from "node:fs";
import { statfs } from "node:fs/promises";
import { dirname } from "node:path";
import type { HealthProbe } from "../../core/health-service.js";

/**
 * Below this much free space the data directory's disk is reported low: a burst of `url`
 * images (a few MiB each) or the WAL growing between checkpoints could take the rest.
 */
export const LOW_STORAGE_BYTES = 16 * 1024 * 1024;

/**
 * The health check of the disk under the data directory (the SQLite ledger, `url` images): one
 * statfs call. Not required: with the disk full the process still serves reads and answers
 * writes with 503 STORAGE_FULL, so health reports it degraded (200) rather than down. The
 * detail gives sizes only, never the path: health is unauthenticated.
 */
export function storageProbe(dataDir: string): HealthProbe {
  return {
    name: "storage",
    required: false,
    async check() {
      const stats = await statfsNearest(dataDir);
      const free = stats.bavail * stats.bsize;
      const detail = `${mib(free)} MiB free of ${mib(stats.blocks * stats.bsize)} MiB`;
      if (free < LOW_STORAGE_BYTES) {
        throw new Error(`${detail}: writes (holds, settlements, sign-ins, keys, images) may be refused`);
      }
      return detail;
    },
  };
}

/** statfs of `dir`, or of its nearest existing parent (the data dir is made on first use). */
async function statfsNearest(dir: string): Promise<StatsFs> {
  try {
    return await statfs(dir);
  } catch (error) {
    const parent = dirname(dir);
    if ((error as { code?: unknown }).code !== "ENOENT" || parent === dir) throw error;
    return statfsNearest(parent);
  }
}

function mib(bytes: number): string {
  return (bytes / (1024 * 1024)).toFixed(1);
}
