"""Budgets that hold (SPEC "Budgets (enforced)"): periods, worst-case reservations, and the
leases that let several replicas admit against one limit without overrunning it."""
