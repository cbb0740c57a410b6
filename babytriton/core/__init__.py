"""The vocabulary every layer shares: errors and diagnostics, dtypes, the configuration, targets and
DLPack conversion. Imports nothing of babytriton outside this folder."""
