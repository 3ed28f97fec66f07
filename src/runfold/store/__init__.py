"""The ledger on disk: segments, the writer lock, group commit, torn tails, the index and the CAS."""
