#!/bin/bash
# Server CPU (clock ticks from /proc) per 2M pipelined CL.THROTTLE calls, as the default user and as
# the app user of docs/security.md ("ACL users"), six alternating rounds. usage: bash bench/acl-cpu.sh dist/main.js PORT
MAIN=$1; PORT=$2
node $MAIN --port $PORT --save '' --bind 127.0.0.1 >/dev/null 2>&1 &
PID=$!; sleep 0.8
redis-cli -p $PORT acl setuser app on '>app-secret' '~*' +@limiter +@connection -@admin +info >/dev/null 2>&1
cpu() { awk '{print $14+$15}' /proc/$PID/stat; }
run() { # $@ = extra auth args
  local a=$(cpu); redis-benchmark -p $PORT "$@" -n 2000000 -c 8 -P 32 -r 100000 -q CL.THROTTLE key:__rand_int__ 100 100 60 >/dev/null 2>&1; local b=$(cpu); echo $((b-a)); }
for i in 1 2 3 4 5 6; do
  d=$(run); echo "default ticks=$d"
  if redis-cli -p $PORT acl whoami >/dev/null 2>&1 && redis-cli -p $PORT acl list >/dev/null 2>&1 && [ "$(redis-cli -p $PORT acl users 2>/dev/null | grep -c app)" = 1 ]; then
    a=$(run --user app -a app-secret); echo "app ticks=$a"; fi
done
kill $PID
