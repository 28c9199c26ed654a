"""hvd.runner.util: helpers under Horovod's names (horovod.runner.util)."""
