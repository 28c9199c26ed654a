#!/bin/bash
# usage: ab.sh ITER HIDDEN STEPS ROUNDS "cfg1" "cfg2" ...   cfg = env assignments
it=$1 h=$2 st=$3 ro=$4; shift 4
for i in $(seq $it); do
  for cfg in "$@"; do
    out=$(env $cfg timeout 300 bin/hvdrun -np 2 /usr/bin/python3 bench/python/step_phases.py --hidden $h --steps $st --rounds $ro 2>&1 | grep -E "^\[0\].*(local|hvd|ddp) ")
    echo "$out" | awk -v c="$cfg" '{k=$1; sub(/.*:/,"",k); s[k]=$NF} END{printf "%-28s local %8d hvd %8d ddp %8d  hvd/ddp %.3f hvd/local %.3f\n", c, s["local"], s["hvd"], s["ddp"], s["hvd"]/s["ddp"], s["hvd"]/s["local"]}'
  done
done
