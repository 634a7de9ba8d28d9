-- Enforced budgets (SPEC "Budgets (enforced)", proxy/ledger/store/budgets.py).
-- A request admitted under a budget carries its reservation (units, 10^-10 USD) and the leases
-- it was taken from; the import that adds its record removes the reservation from each lease in
-- the same transaction. A request a budget refused names that budget.
ALTER TABLE requests ADD COLUMN reserved_units BIGINT;
ALTER TABLE requests ADD COLUMN budget_leases TEXT;
ALTER TABLE requests ADD COLUMN budget TEXT;

-- A replica's share of one budget's period: what it may reserve without asking again.
-- Live while expires_at (UTC microseconds) is ahead; renewed every 30 s, so a killed
-- replica's lease stops counting 90 s after its last renewal.
CREATE TABLE budget_leases (
    id           TEXT PRIMARY KEY,
    budget       TEXT NOT NULL,
    period_start BIGINT NOT NULL,
    amount       BIGINT NOT NULL,
    expires_at   BIGINT NOT NULL
);
CREATE INDEX budget_leases_budget ON budget_leases (budget, period_start);

-- Each alert threshold crossed, once per budget and period, whichever replica saw it first.
CREATE TABLE budget_alerts (
    budget       TEXT NOT NULL,
    period_start BIGINT NOT NULL,
    threshold    INTEGER NOT NULL,
    at           BIGINT NOT NULL,
    PRIMARY KEY (budget, period_start, threshold)
);
