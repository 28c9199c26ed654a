#!/bin/bash
if [ "$HOROVOD_RANK" = 0 ]; then exec perf stat -e 'syscalls:sys_enter_futex,syscalls:sys_enter_process_vm_readv,syscalls:sys_enter_sched_yield,context-switches' -o ${STAT:-/tmp/stat.txt} /usr/bin/python3 "$@"; else exec /usr/bin/python3 "$@"; fi
