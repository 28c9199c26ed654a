import os
def set_slack(ns):
    me = os.getpid()
    n = 0
    for t in os.listdir('/proc/self/task'):
        if int(t) == me: continue
        try:
            open('/proc/self/task/%s/timerslack_ns' % t, 'w').write(str(ns)); n += 1
        except OSError as e:
            print('slack', t, e)
    return n
