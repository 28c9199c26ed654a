#!/usr/bin/env bash
# Engines users already run (issue 17): Slurm (Debian's slurm-wlm + munge)
# and one cached virtual environment with pyspark and ray, created from
# /usr/bin/python3 with --system-site-packages so that Debian's torch and
# numpy stay importable. Java (for Spark) is Debian's OpenJDK.
# Idempotent and fast when done; never fails CI: when something cannot be
# installed the engine's tests skip and name the reason.
set -u
CACHE="${HVD_CACHE_DIR:-$HOME/.cache/hvd}"
VENV="$CACHE/venv-engines-py311"
PYSPARK_VERSION=3.5.3
RAY_VERSION=2.40.0
SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo -n"

t0=$(date +%s)
pkgs=()
command -v slurmctld >/dev/null 2>&1 || [ -x /usr/sbin/slurmctld ] || pkgs+=(slurm-wlm)
command -v munged >/dev/null 2>&1 || [ -x /usr/sbin/munged ] || pkgs+=(munge)
command -v java >/dev/null 2>&1 || pkgs+=(openjdk-17-jre-headless)
if [ ${#pkgs[@]} -gt 0 ] && command -v apt-get >/dev/null; then
  echo "20-engines: installing ${pkgs[*]} with apt-get"
  # slurm-wlm's postinst tries to start the daemons: keep them stopped.
  printf '#!/bin/sh\nexit 101\n' > /tmp/hvd-policy-rc.d && chmod +x /tmp/hvd-policy-rc.d
  [ -e /usr/sbin/policy-rc.d ] || { $SUDO cp /tmp/hvd-policy-rc.d /usr/sbin/policy-rc.d && rm_policy=1; }
  ($SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null) \
    || echo "20-engines: apt-get install ${pkgs[*]} failed: the Slurm/Spark tests will skip"
  [ "${rm_policy:-0}" = 1 ] && $SUDO rm -f /usr/sbin/policy-rc.d
fi
t1=$(date +%s)

if ! "$VENV/bin/python" -c 'import pyspark, ray, torch' >/dev/null 2>&1; then
  echo "20-engines: creating $VENV (pyspark==$PYSPARK_VERSION ray==$RAY_VERSION)"
  mkdir -p "$CACHE"
  rm -rf "$VENV"
  # Every package the venv adds over Debian's, pinned to what the tests
  # passed with (ray's dependencies are otherwise open-ended).
  printf '%s\n' aiosignal==1.4.0 filelock==4.3.1 frozenlist==1.8.0 jsonschema==4.26.0 \
    jsonschema-specifications==2025.9.1 msgpack==1.2.4 protobuf==7.36.2 py4j==0.10.9.7 \
    referencing==0.37.0 rpds-py==2026.9.1 > "$CACHE/engines-constraints.txt"
  /usr/bin/python3 -m venv --system-site-packages "$VENV" \
    && "$VENV/bin/python" -m pip install -q --disable-pip-version-check -c "$CACHE/engines-constraints.txt" \
         "pyspark==$PYSPARK_VERSION" "ray==$RAY_VERSION" \
    || { echo "20-engines: pip install into $VENV failed: the Spark/Ray tests will skip"; rm -rf "$VENV"; }
fi
t2=$(date +%s)
echo "20-engines: apt $((t1-t0)) s, venv $((t2-t1)) s"
exit 0
