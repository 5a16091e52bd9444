-- A measurement, not a migration (bench/pg-pgbench.ts --variant): the single-column CHECKs (x >= 0,
-- x > 0) of the tables a call writes as domains, whose checks the type cache keeps parsed; holds and
-- hold_resolutions keep theirs, as tollgate_resolve returns their columns as BIGINT.
DROP VIEW IF EXISTS ledger_totals CASCADE;
CREATE DOMAIN tg_nonneg AS BIGINT CHECK (VALUE >= 0);
CREATE DOMAIN tg_positive AS BIGINT CHECK (VALUE > 0);
DO $$ DECLARE c record; BEGIN
  FOR c IN SELECT conname, conrelid::regclass::text AS t, pg_get_expr(conbin, conrelid) AS e,
                  (SELECT attname FROM pg_attribute WHERE attrelid = conrelid AND attnum = conkey[1]) AS col
             FROM pg_constraint WHERE contype = 'c' AND array_length(conkey, 1) = 1
              AND conrelid::regclass::text IN ('ledger_balances','ledger_entries','open_holds','spend_days','settlement_intents')
  LOOP
    IF c.e = '(' || c.col || ' >= 0)' THEN
      EXECUTE format('ALTER TABLE %I DROP CONSTRAINT %I', c.t, c.conname);
      EXECUTE format('ALTER TABLE %I ALTER COLUMN %I TYPE tg_nonneg', c.t, c.col);
    ELSIF c.e = '(' || c.col || ' > 0)' THEN
      EXECUTE format('ALTER TABLE %I DROP CONSTRAINT %I', c.t, c.conname);
      EXECUTE format('ALTER TABLE %I ALTER COLUMN %I TYPE tg_positive', c.t, c.col);
    ELSE RAISE NOTICE 'kept % on %: %', c.conname, c.t, c.e;
    END IF;
  END LOOP; END $$;
