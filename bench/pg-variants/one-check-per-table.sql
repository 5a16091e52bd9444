-- A measurement, not a migration (bench/pg-pgbench.ts --variant): each hot table's CHECKs as one
-- constraint, the same expressions joined by AND.
DO $$ DECLARE t text; c record; expr text; BEGIN
  FOREACH t IN ARRAY ARRAY['ledger_balances','ledger_entries','holds','hold_resolutions','open_holds','spend_days','settlement_intents'] LOOP
    expr := NULL;
    FOR c IN SELECT conname, pg_get_expr(conbin, conrelid) AS e FROM pg_constraint WHERE contype = 'c' AND conrelid = t::regclass LOOP
      expr := coalesce(expr || ' AND ', '') || '(' || c.e || ')';
      EXECUTE format('ALTER TABLE %I DROP CONSTRAINT %I', t, c.conname);
    END LOOP;
    IF expr IS NOT NULL THEN EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I CHECK (%s)', t, t || '_all', expr); END IF;
  END LOOP; END $$;
