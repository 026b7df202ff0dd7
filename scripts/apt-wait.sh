# Sourced by the scripts that install packages (test.sh, cri-tools.sh, netperf.sh): another
# apt-get or dpkg (unattended-upgrades, a user's install) holding dpkg's or apt's lock would
# make theirs fail at once with only apt's message. `apt_get` waits for the locks first, at
# most APT_LOCK_WAIT seconds (default 600), saying who holds them, then runs apt-get with
# the same bound on the dpkg lock (another apt-get may take it in between).

# "PID (COMM)" of each process holding one of the locks, from /proc/locks (apt and dpkg take
# fcntl locks; neither fuser nor lsof need be installed).
apt_lock_holders() {
  local f inodes=()
  for f in /var/lib/dpkg/lock-frontend /var/lib/dpkg/lock /var/lib/apt/lists/lock \
    /var/cache/apt/archives/lock; do
    [ -e "$f" ] && inodes+=("$(stat -c %i "$f")")
  done
  [ ${#inodes[@]} -gt 0 ] || return 0
  # A line: "N: POSIX ADVISORY WRITE PID MAJ:MIN:INODE START END" ("N: -> ..." for a waiter,
  # which holds nothing).
  awk -v inodes="${inodes[*]}" '
    BEGIN { n = split(inodes, list, " "); for (i = 1; i <= n; i++) want[list[i]] = 1 }
    $2 != "->" { split($6, dev, ":"); if (dev[3] in want) print $5 }' /proc/locks |
    sort -un | while read -r pid; do
      [ "$pid" = "$$" ] && continue
      printf '%s (%s) ' "$pid" "$(cat "/proc/$pid/comm" 2>/dev/null || echo gone)"
    done
}

apt_wait() {
  local limit=${APT_LOCK_WAIT:-600} t0=$SECONDS said=-1 holders
  while holders=$(apt_lock_holders) && [ -n "$holders" ]; do
    local waited=$((SECONDS - t0))
    if [ "$waited" -ge "$limit" ]; then
      echo "the dpkg/apt lock is still held after ${limit}s by ${holders}(APT_LOCK_WAIT sets the bound)" >&2
      return 1
    fi
    if [ $((waited / 30)) -ne "$said" ]; then
      said=$((waited / 30))
      echo "waiting for the dpkg/apt lock, held by ${holders}(${waited}s of at most ${limit}s)" >&2
    fi
    sleep 2
  done
}

apt_get() {
  apt_wait || return 1
  apt-get -o DPkg::Lock::Timeout="${APT_LOCK_WAIT:-600}" "$@"
}
