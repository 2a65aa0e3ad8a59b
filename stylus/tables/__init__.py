"""Tables (the paper's Laser; docs/tables.md): topics materialised into local RocksDB copies, looked up by
processors (`ctx.table(name).get(key)`) and served over HTTP (`stylus serve`)."""
