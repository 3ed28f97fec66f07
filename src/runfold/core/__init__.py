"""The pure core of runfold: ids, records, canonical bytes, the chain, errors and folds.

Nothing in this package performs I/O or imports any other part of runfold; storage, providers,
tools, the run loop and the CLI all depend on it (DESIGN.md §13).
"""
