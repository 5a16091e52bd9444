-- A measurement, not a migration (bench/pg-pgbench.ts --variant; docs/store.md, "The p99 at 300/s"):
-- tollgate_place_hold with its hold, open-list row and pending entry written by one statement
-- (data-modifying CTEs) instead of three.
CREATE OR REPLACE FUNCTION tollgate_place_hold(
  p_id TEXT, p_account TEXT, p_request TEXT, p_key TEXT, p_chain TEXT, p_amount BIGINT, p_kind TEXT,
  p_model TEXT, p_input BIGINT, p_max BIGINT, p_image_size TEXT, p_image_count INTEGER, p_at BIGINT
) RETURNS TABLE (seq BIGINT) LANGUAGE plpgsql AS $$
  #variable_conflict use_column
  DECLARE
    v_seq BIGINT;
  BEGIN
    IF p_amount > 0 AND NOT EXISTS (
      SELECT 1 FROM ledger_balances b
       WHERE b.account = p_account AND b.chain = p_chain AND b.shard = 0
         AND b.credits_posted - b.debits_posted - b.debits_pending >= p_amount
    ) THEN
      RETURN;
    END IF;
    WITH h AS (
      INSERT INTO holds (id, account_id, request_id, key_id, chain, amount, call_kind, model, input_tokens,
                         max_tokens, image_size, image_count, created_at)
      VALUES (p_id, p_account, p_request, p_key, p_chain, p_amount, p_kind, p_model, p_input, p_max, p_image_size, p_image_count, p_at)
      RETURNING holds.seq
    ), o AS (
      INSERT INTO open_holds (hold_id, created_at) VALUES (p_id, p_at)
    ), e AS (
      INSERT INTO ledger_entries (id, chain, debit_account, credit_account, amount, pending, kind, hold_id, memo, created_at)
      SELECT p_id || '/hold', p_chain, p_account, 'system:revenue', p_amount, true, 'hold', p_id, '', p_at
       WHERE p_amount > 0
    )
    SELECT h.seq INTO v_seq FROM h;
    IF p_amount > 0 THEN
      UPDATE ledger_balances
         SET debits_pending = debits_pending + p_amount, revenue_pending = revenue_pending + p_amount
       WHERE account = p_account AND chain = p_chain AND shard = 0
         AND credits_posted - debits_posted - debits_pending >= p_amount;
      IF NOT FOUND THEN
        RAISE EXCEPTION 'hold %: the funds moved since they were read', p_id USING ERRCODE = 'TG402';
      END IF;
      INSERT INTO spend_days AS d (account_id, key_id, chain, day, spent)
      VALUES (p_account, p_key, p_chain, p_at - p_at % 86400000, p_amount)
      ON CONFLICT (account_id, chain, key_id, day) DO UPDATE SET spent = d.spent + EXCLUDED.spent;
    END IF;
    RETURN QUERY SELECT v_seq;
  END $$;
