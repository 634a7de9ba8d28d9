"""Turning one exchange into a record: usage (reported or estimated), price, workload."""
