-- A measurement, not a migration (bench/pg-pgbench.ts --variant): ledger_balances' 13 CHECKs as one
-- CHECK calling a PL/pgSQL function over the row, whose expression PostgreSQL keeps planned per session.
DO $$ DECLARE c record; BEGIN
  FOR c IN SELECT conname FROM pg_constraint WHERE contype = 'c' AND conrelid = 'ledger_balances'::regclass LOOP
    EXECUTE format('ALTER TABLE ledger_balances DROP CONSTRAINT %I', c.conname);
  END LOOP; END $$;
CREATE FUNCTION tollgate_balance_sound(b ledger_balances) RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS $$
  BEGIN
    RETURN b.debits_pending >= 0 AND b.debits_posted >= 0 AND b.credits_pending >= 0 AND b.credits_posted >= 0
       AND b.revenue_pending >= 0 AND b.revenue_posted >= 0 AND b.x402_in >= 0 AND b.x402_out >= 0
       AND b.shard >= 0 AND b.shard < 16 AND (b.may_overdraw OR b.shard = 0)
       AND (b.may_overdraw OR b.credits_posted - b.debits_posted - b.debits_pending >= 0)
       AND (NOT b.may_overdraw OR (b.revenue_pending = 0 AND b.revenue_posted = 0))
       AND (NOT b.may_overdraw OR (b.x402_in = 0 AND b.x402_out = 0));
  END $$;
ALTER TABLE ledger_balances ADD CONSTRAINT ledger_balances_sound CHECK (tollgate_balance_sound(ledger_balances));
