#!/bin/sh
# Debian's Prometheus server and headless Chromium for the observability
# tests (issue 28: e2e/observe_test.go scrapes a job with a real
# prometheus and screenshots the status page with chromium). Idempotent;
# never fails CI: without them those tests skip, naming what is missing.
if command -v prometheus >/dev/null 2>&1 && command -v chromium >/dev/null 2>&1; then
	exit 0
fi
export DEBIAN_FRONTEND=noninteractive
{ apt-get install -y --no-install-recommends prometheus chromium ||
	{ apt-get update && apt-get install -y --no-install-recommends prometheus chromium; }; } >/tmp/hvd-ci-observability.log 2>&1 ||
	echo "40-observability.sh: could not install prometheus / chromium (see /tmp/hvd-ci-observability.log); the observability tests will skip"
exit 0
