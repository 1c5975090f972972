"""One module per producer/layout: recognise a dump root, parse its files into catalog rows."""

# The `--producer` values, in the order detection tries them (ingest/readers/registry.py's READERS,
# whose names tests/test_readers_registry.py checks against this): the command line offers them
# without importing every reader.
PRODUCER_NAMES = (
    "ascend-raw",
    "mindspore-npy",
    "ascend-raw-v1.2",
    "mindspore-bin",
    "msprobe",
    "ge",
    "atc-om",
)
