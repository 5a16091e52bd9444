-- A billed call's hold and settlement as the gateway sends them (bench/pg-pgbench.ts runs it):
-- client i holds 7,000 of acct_{i mod accounts} and settles 500 of it. One pair per transaction
-- of the script; each statement commits on its own, as the store's do.
\set h random(1, 1000000000000)
\set a :client_id % :accounts
SELECT seq FROM tollgate_place_hold('h' || :h, 'acct_' || :a, 'r' || :h, 'key_bench', 'base', 7000, 'text', 'bench', 10, 64, '', 0, 1700000000000);
SELECT resolved_now FROM tollgate_resolve('h' || :h, 'settled', 500, 10, 10, 0, 0, 0, 0, '', 1700000000001, '');
