"""Framework-independent core of the hvd package: loading libhvd.so, init,
topology queries, process sets and errors. Framework packages (hvd.torch)
build on it."""
