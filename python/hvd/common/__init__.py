"""Framework-independent core of the hvd package. Framework packages
(hvd.torch, hvd.numpy, and the generated hvd.tensorflow and hvd.mxnet) build
on it and only adapt their tensors.

Modules, lowest first (each imports only modules above it in this list):

- _abi: the ctypes layer of libhvd.so, generated from codegen/abi; imported
  only by hvd.common's own modules.
- exceptions: HorovodInternalError, HostsUpdatedInterrupt.
- loader: finds, checks and loads libhvd.so; the fork guard.
- state: the bound library and the topology cached at init; the queries.
- dtypes: the engine's dtype codes.
- compression: the Compressor interface and NoneCompressor.
- process_sets: ProcessSet, the registry, add/remove, set_id().
- ops: the reduce ops and their checks.
- handles: the handle table, poll, synchronize.
- basics: init, shutdown, queries and capabilities, HorovodBasics.
- collectives: every collective and point-to-point op and the object
  helpers once, over a TensorAdapter that a framework implements.
"""
