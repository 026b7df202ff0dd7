#!/usr/bin/env bash
# Old (main f940837) and new (branch i46-paid) release binaries side by side, alternating,
# each mode 5 times: busy (100,000 switches/s asked + one loopback stream) and quiet.
# Usage: run.sh OLD_BIN NEW_BIN OUTDIR [RUNS]
set -u
old=$1 new=$2 out=$3 runs=${4:-5}
mkdir -p "$out"
for i in $(seq 1 "$runs"); do
  for mode in busy quiet; do
    for which in old new; do
      bin=$old; [ "$which" = new ] && bin=$new
      bg=(); [ "$mode" = busy ] && bg=(--background switches:100000,stream:1)
      f="$out/$mode-$which-$i.json"
      echo "load_before $(cut -d' ' -f1-3 /proc/loadavg)" > "$f.load"
      "$bin" bench overhead --policies all --duration 20s --runs 1 --paths events "${bg[@]}" --json > "$f" 2> "$f.err"
      echo "rc $? load_after $(cut -d' ' -f1-3 /proc/loadavg)" >> "$f.load"
      echo "$(date +%T) $mode $which $i: $(cat "$f.load" | tr '\n' ' ')"
    done
  done
done
