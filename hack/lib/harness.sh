# Shared by the suites that run the built daemon against real clients offline
# (hack/conformance/run.sh, hack/node-e2e/run.sh). Source it; it defines functions only.
# The caller sets T0 (start time), LOG_TAG (log prefix), and, before using the leak checks,
# W (its temp dir) and LEAKS=0.

log() { echo "[$LOG_TAG +$(($(date +%s) - T0))s] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }
leak() { LEAKS=$((LEAKS + 1)); log "LEAK: $*"; }

# apt_need PKG...: install the Debian packages that are missing (apt-get update once).
apt_need() {
	local p missing=""
	for p in "$@"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"; done
	if [ -n "$missing" ]; then
		log "installing:$missing"
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
	fi
}

# start_registry DIR: Debian's docker-registry on 127.0.0.1 at a free port, storage in DIR;
# sets REG (host:port) and REG_PID.
start_registry() {
	local dir=$1
	mkdir -p "$dir"
	cat >"$dir/config.yml" <<EOF
version: 0.1
log: {level: info, accesslog: {disabled: true}}
storage: {filesystem: {rootdirectory: $dir/storage}}
http: {addr: "127.0.0.1:0"}
EOF
	docker-registry serve "$dir/config.yml" >"$dir/log" 2>&1 &
	REG_PID=$!
	REG=""
	for _ in $(seq 1 100); do
		REG=$(sed -n 's/.*msg="listening on \(127\.0\.0\.1:[0-9]*\)".*/\1/p' "$dir/log")
		[ -n "$REG" ] && break
		kill -0 "$REG_PID" 2>/dev/null || break
		sleep 0.1
	done
	[ -n "$REG" ] || { cat "$dir/log" >&2; die "docker-registry did not come up"; }
	log "registry on http://$REG"
}

# run_pids: pids of processes that belong to this run: command line or cwd in $W.
run_pids() {
	local p
	for p in /proc/[0-9]*; do
		p=${p#/proc/}
		[ "$p" = $$ ] && continue
		if tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -qF "$W" ||
			readlink "/proc/$p/cwd" 2>/dev/null | grep -qF "$W"; then
			echo "$p"
		fi
	done
}

# kill_run_pids: report and kill what run_pids finds.
kill_run_pids() {
	local pids p
	pids=$(run_pids)
	[ -n "$pids" ] || return 0
	leak "processes of this run still alive:"
	for p in $pids; do echo "    $p $(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | cut -c1-200)" >&2; done
	kill -KILL $pids 2>/dev/null
	sleep 0.5
}

# iptables_cleanup NET_NAME SUBNET_RE: remove the rules the CNI plugins made for one network
# (bridge ipMasq, portmap) and the per-pod chains they jump to; the shared CNI-HOSTPORT-*
# chains stay. Anything found is a leak.
iptables_cleanup() {
	local net=$1 subnet_re=$2 table save chains jumps rule n=0 c
	for table in nat filter; do
		save=$(iptables-save -t $table 2>/dev/null) || continue
		chains=$({
			grep -E -- "^-A .*($net|$subnet_re)" <<<"$save" | grep -oE -- '-j CNI-[A-Za-z0-9_-]+' | cut -c4-
			grep -E -- "^-A CNI-[^ ]+ .*($net|$subnet_re)" <<<"$save" | awk '{print $2}'
		} | grep -vE '^CNI-HOSTPORT-(DNAT|MASQ|SETMARK)$' | sort -u)
		jumps=$(echo $chains | tr ' ' '|')
		while read -r rule; do
			[ -n "$rule" ] || continue
			n=$((n + 1))
			eval "iptables -t $table ${rule/#-A/-D}" 2>/dev/null
		done < <(grep -E -- "^-A .*($net|$subnet_re${jumps:+|-j ($jumps)( |\$)})" <<<"$save")
		for c in $chains; do iptables -t $table -F "$c" 2>/dev/null; iptables -t $table -X "$c" 2>/dev/null; done
	done
	[ $n = 0 ] || leak "$n iptables rule(s) of network $net were left"
}

# umount_under DIR [-v]: unmount whatever is mounted at or below DIR (deepest first); prints
# the count.
umount_under() {
	local m mp
	m=$(awk -v d="$1" '$5 == d || index($5, d "/") == 1 {print $5}' /proc/self/mountinfo | sort -r)
	[ -n "$m" ] || { echo 0; return; }
	# -v: name each one (on stderr), where a mount left is a leak to chase.
	[ "${2:-}" = -v ] && awk -v d="$1" '$5 == d || index($5, d "/") == 1 {print "  left: " $5 " (" $9 " " $10 ")"}' /proc/self/mountinfo >&2
	for mp in $m; do umount -l "$mp" 2>/dev/null; done
	echo "$m" | wc -l
}

# claim_run: marks $W as a live run's (its owner: this shell's PID and start time, so a reused
# PID does not pass for it). reclaim_dead_runs tells a live run's directory from a dead one's
# by it.
claim_run() {
	echo "$$ $(proc_start $$)" >"$W/.owner"
}
proc_start() { awk '{print $22}' "/proc/$1/stat" 2>/dev/null; }
run_alive() {
	local pid start
	read -r pid start 2>/dev/null <"$1/.owner" || return 1
	[ -n "$pid" ] && [ "$(proc_start "$pid")" = "$start" ]
}

# reclaim_dead_runs PREFIX: removes what runs killed before their cleanup (a session's end, a
# CI timeout, kill -9) left in /tmp/PREFIX.*: their processes, the containers runc and runsc
# still know under their roots, their mounts and directories, and, when no run of PREFIX is
# alive, the bridge and iptables rules of $BRIDGE, $NET_NAME, $SUBNET_RE. These are not this
# run's leaks: it logs what it removed and goes on. Prints the number of live runs of PREFIX.
reclaim_dead_runs() (
	# A subshell without errexit: iptables_cleanup, like all cleanup here, runs under set +e.
	set +e
	local prefix=$1 d h p bin ids all live=0 n=0
	for d in /tmp/"$prefix".*; do
		[ -d "$d" ] || continue
		if run_alive "$d"; then live=$((live + 1)); continue; fi
		n=$((n + 1))
		W=$d all="" LEAKS=0
		for p in $(run_pids); do kill -KILL "$p" 2>/dev/null; done
		for h in runc runsc; do
			[ -d "$d/run/$h" ] || continue
			bin=/usr/sbin/runc
			[ $h = runsc ] && bin=/usr/local/bin/runsc
			ids=$($bin --root "$d/run/$h" list -q 2>/dev/null)
			for id in $ids; do $bin --root "$d/run/$h" delete -force "$id" >/dev/null 2>&1; done
			all="$all $ids"
		done
		umount_under "$d" >/dev/null
		rm -rf "$d"
		log "removed the leftovers of a dead run: $d$([ -z "${all// /}" ] || echo " (containers:$(echo $all | cut -c1-200))")"
	done
	if [ $live = 0 ] && [ $n -gt 0 ]; then
		ip link show "$BRIDGE" >/dev/null 2>&1 && ip link del "$BRIDGE"
		# Its rules are the dead run's: iptables_cleanup's leak count stays in this subshell.
		iptables_cleanup "$NET_NAME" "$SUBNET_RE" 2>/dev/null
	fi
	echo $live
)

# finish_run RC: the last of a run's cleanup, the same in every runner: the run's bridge
# and its iptables rules ($BRIDGE, $NET_NAME, $SUBNET_RE), its temp dir $W, then the leak
# verdict; exits with RC, or 1 when RC is 0 and something leaked.
finish_run() {
	local rc=$1
	ip link show "$BRIDGE" >/dev/null 2>&1 && ip link del "$BRIDGE"
	iptables_cleanup "$NET_NAME" "$SUBNET_RE"
	rm -rf "$W" || leak "could not remove $W"
	[ -e "$W" ] && leak "$W still exists"
	if [ "$LEAKS" -gt 0 ]; then
		log "FAIL: $LEAKS leak(s) after cleanup (see above)"
		[ "$rc" = 0 ] && rc=1
	fi
	log "done in $(($(date +%s) - T0))s (exit $rc)"
	exit "$rc"
}
