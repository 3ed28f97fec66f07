"""runfold: a runtime for LLM agents whose only history is one append-only, hash-chained ledger."""

__version__ = "0.1.0"
