#!/bin/bash
# side by side, alternating order, quiet VM: old = 1ad8d54 (before issue 49), new = 5636a76
cd /tmp
for i in 1 2 3 4 5 6; do
  if [ $((i % 2)) = 1 ]; then order="old new"; else order="new old"; fi
  for b in $order; do
    timeout 200 placer-$b bench overhead --policies all --duration 20s --runs 1 --paths events,proc --json > ./ov-$b-$i.json 2>./ov-$b-$i.err
    timeout 200 placer-$b bench cycle --runs 30 --json > ./cy-$b-$i.json 2>./cy-$b-$i.err
  done
done
echo done > ./DONE
