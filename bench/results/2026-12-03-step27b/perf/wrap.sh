#!/usr/bin/env bash
if [ "$HOROVOD_RANK" = 0 ]; then
  exec perf stat -x, -o /tmp/prof/perf_$TAG.txt -e context-switches,syscalls:sys_enter_futex,syscalls:sys_enter_sched_yield,syscalls:sys_enter_poll,syscalls:sys_enter_ppoll,syscalls:sys_enter_epoll_pwait,syscalls:sys_enter_nanosleep,syscalls:sys_enter_write,syscalls:sys_enter_read /usr/bin/python3 "$@"
fi
exec /usr/bin/python3 "$@"
