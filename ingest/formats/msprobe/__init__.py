"""msprobe's files, bytes to values: `dump.json` (every task and level) and the PyTorch `.pt`
tensor files it writes (read without torch)."""
