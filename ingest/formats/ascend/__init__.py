"""CANN/Ascend files, bytes to values: raw protobuf dumps (`dump_data.proto`) and their device
formats, CANN's statistics csv, overflow records, and GE graphs (`ge_ir.proto`, TorchAir)."""
