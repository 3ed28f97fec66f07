"""The `runfold` command line: one module per group of verbs, built on the public API only."""
