"""The ledger on disk: segments, the writer lock, group commit, torn tails, the index and the CAS.

`LedgerView` is the shape every reader of verified lines shares (`Ledger`, `BareLedger`)."""

from runfold.store.view import LedgerView

__all__ = ["LedgerView"]
