import os, time
def find_sysmon(samples=200):
    seen = {}
    me = os.getpid()
    for _ in range(samples):
        for t in os.listdir('/proc/self/task'):
            try:
                nr = open('/proc/self/task/%s/syscall' % t).read().split()[0]
            except OSError:
                continue
            if nr == '35':
                seen[int(t)] = seen.get(int(t), 0) + 1
        time.sleep(0.0005)
    return seen
def idle_sysmon():
    seen = find_sysmon()
    for tid in seen:
        os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
    return seen
