-- A measurement, not a migration (bench/pg-pgbench.ts --variant): what the foreign-key checks of a
-- call's rows cost (each locks its parent row FOR KEY SHARE).
ALTER TABLE open_holds DROP CONSTRAINT open_holds_hold_id_fkey;
ALTER TABLE hold_resolutions DROP CONSTRAINT hold_resolutions_hold_id_fkey;
ALTER TABLE holds DROP CONSTRAINT holds_account_id_fkey;
ALTER TABLE settlement_intents DROP CONSTRAINT settlement_intents_hold_id_fkey;
