"""hvd.runner.util.threads: Horovod's thread helper (horovod.runner.util.threads)."""
import threading


def in_thread(target, args=(), name=None, daemon=True, silent=False):
    """Starts target(*args) in a new thread and returns the thread (a daemon
    by default). silent=True swallows an exception the target raises
    instead of letting the thread report it."""
    if silent:
        def run(*a):
            try:
                target(*a)
            except BaseException:
                pass
    else:
        run = target
    thread = threading.Thread(target=run, args=args, name=name, daemon=daemon)
    thread.start()
    return thread
