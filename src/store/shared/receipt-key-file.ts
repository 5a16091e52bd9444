import { createPrivateKey, generateKeyPairSync, type KeyObject } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

/** The receipt key's file in the data dir, for a deployment without a master secret. */
export const RECEIPT_KEY_FILE = "receipt-key.pem";

/**
 * The receipt signing key kept in `dataDir` (PKCS#8 PEM, mode 0600), made at the first start
 * that needs it. Only a gateway without TOLLGATE_MASTER_SECRET (chains off) signs with it: with a
 * master secret the key derives from it, so that several hosts sign alike (docs/receipts.md).
 */
export function dataDirReceiptKey(dataDir: string): KeyObject {
  const path = join(dataDir, RECEIPT_KEY_FILE);
  try {
    return createPrivateKey(readFileSync(path, "utf8"));
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "ENOENT") throw error;
  }
  const pem = generateKeyPairSync("ed25519").privateKey.export({ format: "pem", type: "pkcs8" }) as string;
  try {
    // "wx": two processes starting together keep the first one's key.
    writeFileSync(path, pem, { mode: 0o600, flag: "wx" });
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
  }
  return createPrivateKey(readFileSync(path, "utf8"));
}
