#!/usr/bin/env bash
# bench/peers/run.sh (make bench-peers): the dpu's compare-and-swap beside
# its peers, measured in one run and printed as one table.
#
# It installs redis-server, redis-tools and memcached from Debian when they
# are missing, starts them on loopback ports of its own, stands up 3-node
# line fabrics with bin/dpu-fabric (node 0 is where the clients run; a page
# allocated at node 0, 1 or 2 is owned here, one hop or two hops away), and
# runs bench/peers/peerload (a C program linked against libdpu) for every
# variant:
#   links      udp (loopback) and veth (namespaces + AF_XDP; root only)
#   loop       the agent's loop mode: blocking, adaptive, poll
#   transport  socket (DPU_RINGS=0) and ring (libdpu's default when the
#              agent offers rings)
#   owner      local, 1 hop, 2 hops
#   clients    1 and 16 (threads, one connection each)
#   replicas   1 and 2 (dpu-fabric up --replicas: with 2, every write and
#              transfer is held by a backup before it is acknowledged)
# and, for each fabric, 4 KiB ownership transfers between node 0 and node 1
# (peerload transfer: dpu_acquire at the node that does not own the page,
# then dpu_release),
# and a bandwidth table: iperf3 over loopback (UDP with 4 KiB datagrams, and
# TCP) as the baseline, beside bulk stores and loads (peerload store and
# load: dpu_store and dpu_load of BENCH_BULK_BYTES through the socket
# transport, from node 1 of memory owned by node 0) over 2-node
# UDP fabrics whose link stripes over 1 and 4 channels, with link crypto
# (dpu-fabric's keys) and without (the keys taken out of the agents'
# configuration), every rate also as a ratio to iperf3's UDP rate and to
# the one-channel fabric of the same crypto,
# beside a SOCK_SEQPACKET echo between two processes (the floor), Redis Lua
# CAS (EVALSHA, and redis-benchmark's eval as a cross-check) and memcached
# gets+cas. Every figure is also given as a ratio to Redis with the same
# number of clients. Whatever the agent or the machine does not offer is
# printed as "n/a (why)", found out at run time.
#
# Environment: BENCH_QUICK=1 (a short smoke run), BENCH_SECS (seconds per
# measurement), BENCH_LINKS (default "udp veth"), BENCH_MODES (default
# "blocking adaptive poll"), BENCH_CLIENTS (default "1 16"), BENCH_REPLICAS
# (default "1 2"), BENCH_BULK_BYTES (default 1048576), BENCH_BULK_CLIENTS
# (default "1 8"), BENCH_CHANNELS (default "1 4"), BENCH_BANDWIDTH=0 (no
# bandwidth table).
# Everything it starts is stopped on exit, failure or interrupt.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
BIN=$ROOT/bin
QUICK=${BENCH_QUICK:-0}
if [[ $QUICK == 1 ]]; then
	SECS=${BENCH_SECS:-0.25} WARM=0.05 EXTEND=1
else
	SECS=${BENCH_SECS:-1.0} WARM=0.2 EXTEND=5
fi
LINKS=${BENCH_LINKS:-udp veth}
MODES=${BENCH_MODES:-blocking adaptive poll}
CLIENTS=${BENCH_CLIENTS:-1 16}
REPLICAS=${BENCH_REPLICAS:-1 2}
BULK_BYTES=${BENCH_BULK_BYTES:-1048576}
BULK_CLIENTS=${BENCH_BULK_CLIENTS:-1 8}
CHANNELS=${BENCH_CHANNELS:-1 4}
BANDWIDTH=${BENCH_BANDWIDTH:-1}
OWNERS=(local "1 hop" "2 hops")
for l in $LINKS; do
	[[ $l == udp || $l == veth ]] || { echo "bench-peers: BENCH_LINKS: $l is neither udp nor veth" >&2; exit 2; }
done
for r in $REPLICAS; do
	[[ $r =~ ^[1-9][0-9]?$ && $r -le 3 ]] || { echo "bench-peers: BENCH_REPLICAS: $r is not 1, 2 or 3 (a 3-node fabric)" >&2; exit 2; }
done
for m in $MODES; do
	[[ $m == blocking || $m == adaptive || $m == poll ]] || { echo "bench-peers: BENCH_MODES: $m is not blocking, adaptive or poll" >&2; exit 2; }
done

LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
START=$(date -u '+%Y-%m-%d %H:%M UTC')
SECONDS=0
log() { printf 'bench-peers: %s\n' "$*" >&2; }

# ---- peers: installed from Debian when missing ----
install_peers() {
	local need=()
	command -v redis-server >/dev/null || need+=(redis-server)
	command -v redis-benchmark >/dev/null && command -v redis-cli >/dev/null || need+=(redis-tools)
	command -v memcached >/dev/null || need+=(memcached)
	[[ $BANDWIDTH == 0 ]] || command -v iperf3 >/dev/null || need+=(iperf3)
	[[ ${#need[@]} -eq 0 ]] && return 0
	log "installing ${need[*]} (apt-get)"
	local sudo=()
	[[ $(id -u) -eq 0 ]] || sudo=(sudo)
	"${sudo[@]}" apt-get -o DPkg::Lock::Timeout=600 update -q >/dev/null
	"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 \
		install -y -q --no-install-recommends "${need[@]}" >/dev/null
}
install_peers

# ---- the load generator, built against libdpu ----
BUILD=$ROOT/bench/peers/build
PEERLOAD=$BUILD/peerload
make -s -C hostif/c build/libdpu.a
# A libdpu that knows DPU_RINGS has the ring transport.
LIBDPU_RINGS=no
! grep -q DPU_RINGS hostif/c/build/libdpu.a || LIBDPU_RINGS=yes
if [[ ! -x $PEERLOAD || bench/peers/loadgen/peerload.c -nt $PEERLOAD || hostif/c/build/libdpu.a -nt $PEERLOAD ]]; then
	mkdir -p "$BUILD"
	${CC:-cc} -O2 -g -std=c11 -Wall -Wextra -Werror -Wshadow -Ihostif/c/include -pthread \
		-o "$PEERLOAD" bench/peers/loadgen/peerload.c hostif/c/build/libdpu.a
fi
for b in dpu-agent dpu-fabric; do
	[[ -x $BIN/$b ]] || { log "$BIN/$b missing: run make build"; exit 1; }
done

# ---- cleanup: every process and fabric this run starts ----
WORK=$(mktemp -d "${TMPDIR:-/tmp}/dpu-bench-peers.XXXXXX")
PIDS=()
FABRICS=()
CHILD=
# bounded LIMIT COMMAND...: runs a command in the background under a time
# bound and waits for it, so that a signal reaches the trap at once.
bounded() {
	local b=$1 rc=0
	shift
	timeout "$b" "$@" &
	CHILD=$!
	wait "$CHILD" || rc=$?
	CHILD=
	return "$rc"
}
cleanup() {
	local rc=$?
	trap - EXIT INT TERM HUP
	if [[ -n $CHILD ]]; then
		kill "$CHILD" 2>/dev/null || true
		wait "$CHILD" 2>/dev/null || true
	fi
	for d in "${FABRICS[@]}"; do
		[[ -f $d/fabric.json ]] || continue
		timeout 30 "$BIN/dpu-fabric" down --dir "$d" >/dev/null 2>&1 || log "dpu-fabric down --dir $d failed"
	done
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${PIDS[@]}"; do
		for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$p" 2>/dev/null || true
		wait "$p" 2>/dev/null || true
	done
	if [[ $rc -eq 0 ]]; then rm -rf "$WORK"; else log "failed (exit $rc); logs kept in $WORK"; fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM HUP

# ---- results: one tab-separated row per measurement ----
# path, links, loop, transport, owner, clients, p50 µs, p99 µs, ops/s, note
ROWS=$WORK/rows.tsv
: >"$ROWS"
row() { (IFS=$'\t'; printf '%s\n' "$*") >>"$ROWS"; }
na() { row "$1" "$2" "$3" "$4" "$5" "$6" "n/a ($7)" n/a n/a ""; }

# measure PATH LINKS LOOP TRANSPORT OWNER CLIENTS -- COMMAND...: runs one
# peerload measurement (bounded) and records its row.
measure() {
	local path=$1 links=$2 loop=$3 transport=$4 owner=$5 clients=$6
	shift 7
	local bound
	bound=$(awk -v s="$SECS" -v w="$WARM" -v e="$EXTEND" 'BEGIN { printf "%d", s + w + e + 40 }')
	if ! bounded "$bound" "$@" >"$WORK/out" 2>>"$WORK/peerload.err"; then
		na "$path" "$links" "$loop" "$transport" "$owner" "$clients" "failed: $(tail -n 1 "$WORK/peerload.err")"
		return 0
	fi
	local line
	line=$(grep '^result ' "$WORK/out" | tail -n 1)
	field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$line"; }
	if [[ -z $line || $(field ops) == 0 ]]; then
		na "$path" "$links" "$loop" "$transport" "$owner" "$clients" \
			"no operation completed: ${line:-no result}; $(tail -n 1 "$WORK/peerload.err")"
		return 0
	fi
	local note=""
	[[ $(field errors) == 0 ]] || note="$(field errors) errors"
	if [[ $path == dpu* ]]; then
		local want=${owner%% *}
		[[ $want == local ]] && want=0
		[[ $(field hops) == "$want" && $(field hops_after) == "$want" ]] ||
			note="${note:+$note; }owner at $(field hops) hops, $(field hops_after) after"
		[[ $(field transport) == "$transport" ]] || note="${note:+$note; }ran over $(field transport)"
	fi
	row "$path" "$links" "$loop" "$transport" "$owner" "$clients" "$(field p50_us)" "$(field p99_us)" "$(field ops_s)" "$note"
}

# ---- the floor and the peers ----
HOST=127.0.0.1
"$PEERLOAD" echo-server "$WORK/echo.sock" & PIDS+=($!)
REDIS_PORT=$("$PEERLOAD" freeport)
redis-server --bind $HOST --port "$REDIS_PORT" --save '' --appendonly no --dir "$WORK" \
	--logfile "$WORK/redis.log" --daemonize no & PIDS+=($!)
MC_PORT=$("$PEERLOAD" freeport)
mc_user=()
[[ $(id -u) -ne 0 ]] || mc_user=(-u nobody)
memcached -l $HOST -p "$MC_PORT" -U 0 -m 64 "${mc_user[@]}" 2>"$WORK/memcached.log" & PIDS+=($!)
for _ in $(seq 100); do
	[[ -S $WORK/echo.sock ]] && redis-cli -h $HOST -p "$REDIS_PORT" ping 2>/dev/null | grep -q PONG &&
		(exec 3<>"/dev/tcp/$HOST/$MC_PORT") 2>/dev/null && break
	sleep 0.1
done
redis-cli -h $HOST -p "$REDIS_PORT" ping | grep -q PONG || { log "redis-server did not start (see $WORK/redis.log)"; exit 1; }
(exec 3<>"/dev/tcp/$HOST/$MC_PORT") || { log "memcached did not start"; exit 1; }

REDIS_VERSION=$(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p')
MC_VERSION=$(memcached -V | awk '{print $2}')
CAS_LUA="local v = redis.call('GET', KEYS[1]) or '0' if v == ARGV[1] then redis.call('SET', KEYS[1], ARGV[2]) end return v"
PL=("$PEERLOAD" -t "$SECS" -w "$WARM" -e "$EXTEND")

log "peers: SOCK_SEQPACKET echo, Redis $REDIS_VERSION on :$REDIS_PORT, memcached $MC_VERSION on :$MC_PORT"
for c in $CLIENTS; do
	measure "SOCK_SEQPACKET echo (floor)" - - - - "$c" -- "${PL[@]}" -c "$c" echo "$WORK/echo.sock"
	measure "Redis Lua CAS (EVALSHA)" - - - - "$c" -- "${PL[@]}" -c "$c" redis "$HOST:$REDIS_PORT"
	# redis-benchmark as a cross-check of the client above: about as many
	# requests as that client did in the same time.
	ops=$(awk -F'\t' -v c="$c" '$1 ~ /^Redis Lua CAS/ && $6 == c { printf "%d", $9 }' "$ROWS")
	n=$(awk -v o="${ops:-0}" -v s="$SECS" 'BEGIN { n = int(o * s); if (n < 1000) n = 1000; print n }')
	if bounded 120 redis-benchmark -h $HOST -p "$REDIS_PORT" -c "$c" -n "$n" -r 1000000 --csv \
		eval "$CAS_LUA" 1 'peers:rb:__rand_int__' 0 1 >"$WORK/out" 2>>"$WORK/redis-benchmark.err"; then
		# "test","rps","avg","min","p50","p95","p99","max" (latencies in ms)
		read -r rps p50 p99 < <(tail -n 1 "$WORK/out" | awk -F'","' '{ gsub(/"/, "", $NF); printf "%.0f %.1f %.1f\n", $2, $5 * 1000, $7 * 1000 }')
		row "Redis Lua CAS (redis-benchmark eval)" - - - - "$c" "$p50" "$p99" "$rps" ""
	else
		na "Redis Lua CAS (redis-benchmark eval)" - - - - "$c" "redis-benchmark failed"
	fi
	measure "memcached gets+cas" - - - - "$c" -- "${PL[@]}" -c "$c" memcached "$HOST:$MC_PORT"
done

# ---- bandwidth: iperf3 over loopback, then bulk stores over 2-node fabrics ----
# One row per measurement: path, links, channels, link crypto, clients,
# MB/s, note.
BW_ROWS=$WORK/bandwidth.tsv
: >"$BW_ROWS"
bw_row() { (IFS=$'\t'; printf '%s\n' "$*") >>"$BW_ROWS"; }
# iperf3_rate ARGS...: the receiver's rate of one iperf3 run in MB/s, or
# nothing.
iperf3_rate() {
	bounded "$(awk -v s="$SECS" 'BEGIN { printf "%d", s + 30 }')" iperf3 -c $HOST -p "$IPERF_PORT" -f m \
		-t "$(awk -v s="$SECS" 'BEGIN { printf "%d", (s < 1 ? 1 : s + 0.5) }')" "$@" >"$WORK/out" 2>>"$WORK/iperf3.err" || return 0
	awk '/receiver/ { for (i = 2; i <= NF; i++) if ($i == "Mbits/sec") r = $(i - 1) / 8 } END { if (r != "") printf "%.1f\n", r }' "$WORK/out"
}
plain_agent() { # a dpu-agent whose links are plaintext: dpu-fabric's key lines taken out
	local w=$WORK/agent-plain
	cat >"$w" <<-EOF
		#!/bin/sh
		# dpu-agent without key-file and fabric-keys: plaintext links
		if [ "\$1" = --config ]; then
			sed -i '/^key-file *=/d; /^fabric-keys *=/d' "\$2"
		fi
		exec '$BIN/dpu-agent' "\$@"
	EOF
	chmod +x "$w"
	echo "$w"
}
if [[ $BANDWIDTH != 0 ]]; then
	IPERF_PORT=$("$PEERLOAD" freeport)
	iperf3 -s -B $HOST -p "$IPERF_PORT" >"$WORK/iperf3-server.log" 2>&1 & PIDS+=($!)
	for _ in $(seq 50); do (exec 3<>"/dev/tcp/$HOST/$IPERF_PORT") 2>/dev/null && break; sleep 0.1; done
	log "bandwidth: iperf3 $(iperf3 --version | head -n 1 | awk '{print $2}') on :$IPERF_PORT, bulk stores and loads of $BULK_BYTES bytes"
	r=$(iperf3_rate -u -b 0 -l 4096)
	if [[ -n $r ]]; then bw_row "iperf3 UDP, 4 KiB datagrams" loopback - - 1 "$r" ""; else bw_row "iperf3 UDP, 4 KiB datagrams" loopback - - 1 "n/a (iperf3 failed: $(tail -n 1 "$WORK/iperf3.err" 2>/dev/null))" ""; fi
	r=$(iperf3_rate)
	if [[ -n $r ]]; then bw_row "iperf3 TCP" loopback - - 1 "$r" ""; else bw_row "iperf3 TCP" loopback - - 1 "n/a (iperf3 failed: $(tail -n 1 "$WORK/iperf3.err" 2>/dev/null))" ""; fi
	for crypto in sealed plaintext; do
		agent=$BIN/dpu-agent
		[[ $crypto == sealed ]] || agent=$(plain_agent)
		for ch in $CHANNELS; do
			dir=$WORK/fabric-bulk-$crypto-$ch
			FABRICS+=("$dir")
			log "fabric: 2 nodes, udp links of $ch channels, $crypto"
			if ! bounded 120 "$BIN/dpu-fabric" up --nodes 2 --topo line --links udp --channels "$ch" --dir "$dir" \
				--agent "$agent" >"$dir.log" 2>&1; then
				for op in store load; do
					for c in $BULK_CLIENTS; do
						bw_row "dpu bulk $op" udp "$ch" "$crypto" "$c" "n/a (fabric did not come up: $(tail -n 1 "$dir.log"))" ""
					done
				done
				[[ ! -f $dir/fabric.json ]] || timeout 30 "$BIN/dpu-fabric" down --dir "$dir" >/dev/null 2>&1 || true
				FABRICS=()
				continue
			fi
			for op in store load; do
			for c in $BULK_CLIENTS; do
				path="dpu bulk $op"
				bound=$(awk -v s="$SECS" -v w="$WARM" -v e="$EXTEND" 'BEGIN { printf "%d", s + w + e + 60 }')
				# through the socket: the link's rate, not the ring's
				if ! bounded "$bound" env DPU_RINGS=0 "${PL[@]}" -c "$c" "$op" "$dir/node1/dpu0.sock" "$dir/node0/dpu0.sock" "$BULK_BYTES" \
					>"$WORK/out" 2>>"$WORK/peerload.err"; then
					bw_row "$path" udp "$ch" "$crypto" "$c" "n/a (failed: $(tail -n 1 "$WORK/peerload.err"))" ""
					continue
				fi
				line=$(grep '^result ' "$WORK/out" | tail -n 1)
				mb=$(sed -n 's/.* mb_s=\([^ ]*\).*/\1/p' <<<"$line")
				errs=$(sed -n 's/.* errors=\([^ ]*\).*/\1/p' <<<"$line")
				note=""
				[[ ${errs:-0} == 0 ]] || note="$errs errors"
				if [[ -z $mb || $mb == 0.0 ]]; then
					bw_row "$path" udp "$ch" "$crypto" "$c" "n/a (no $op completed: ${line:-no result})" ""
				else
					bw_row "$path" udp "$ch" "$crypto" "$c" "$mb" "$note"
				fi
			done
			done
			timeout 30 "$BIN/dpu-fabric" down --dir "$dir" >/dev/null 2>&1 || log "dpu-fabric down --dir $dir failed"
			FABRICS=()
		done
	done
fi

# ---- the agent's loop modes: what this dpu-agent accepts ----
# The "loop = blocking|adaptive|poll" configuration key where the agent has
# it; an agent without it has only "poll = false" (blocking) and
# "poll = true".
loop_key=no
if "$BIN/dpu-agent" --help 2>&1 | grep -q -- '-loop'; then
	loop_key=yes
else
	mkdir -p "$WORK/probe"
	printf 'loop = adaptive\nrun-dir = %s\nheartbeat = 1s\ndead-interval = 1ms\n' "$WORK/probe" >"$WORK/probe/agent.conf"
	bounded 5 "$BIN/dpu-agent" --config "$WORK/probe/agent.conf" >"$WORK/probe/out" 2>&1 || true
	grep -q 'loop' "$WORK/probe/out" || loop_key=yes
fi
mode_line() { # the configuration line for mode $1, or nothing when unsupported
	if [[ $loop_key == yes ]]; then
		echo "loop = $1"
	else
		case $1 in
		blocking) echo "poll = false" ;;
		poll) echo "poll = true" ;;
		esac
	fi
}
agent_for() { # a dpu-agent that adds mode $1's line to the configuration dpu-fabric wrote
	local w=$WORK/agent-$1
	cat >"$w" <<-EOF
		#!/bin/sh
		# dpu-agent with "$(mode_line "$1")" added to its configuration
		if [ "\$1" = --config ] && ! grep -qx '$(mode_line "$1")' "\$2"; then
			printf '%s\n' '$(mode_line "$1")' >>"\$2"
		fi
		exec '$BIN/dpu-agent' "\$@"
	EOF
	chmod +x "$w"
	echo "$w"
}

# ---- the fabrics ----
for links in $LINKS; do
	for mode in $MODES; do
	for replicas in $REPLICAS; do
		path="dpu CAS"
		xfer="dpu 4 KiB ownership transfer"
		if [[ $replicas != 1 ]]; then
			path="$path, replicas = $replicas"
			xfer="$xfer, replicas = $replicas"
		fi
		if [[ $links == veth && $(id -u) -ne 0 ]]; then
			na "$path" "$links" "$mode" all all all "veth links need root"
			continue
		fi
		if [[ -z $(mode_line "$mode") ]]; then
			na "$path" "$links" "$mode" all all all "agent has no loop = $mode"
			continue
		fi
		# The floor and the peer again, just before the rows divided by them.
		for c in $CLIENTS; do
			measure "SOCK_SEQPACKET echo (floor), again" - - - - "$c" -- "${PL[@]}" -c "$c" echo "$WORK/echo.sock"
			measure "Redis Lua CAS (EVALSHA), again" - - - - "$c" -- "${PL[@]}" -c "$c" redis "$HOST:$REDIS_PORT"
		done
		dir=$WORK/fabric-$links-$mode-r$replicas
		FABRICS+=("$dir")
		log "fabric: 3 nodes, line, $links links, $(mode_line "$mode"), replicas $replicas"
		if ! bounded 120 "$BIN/dpu-fabric" up --nodes 3 --topo line --links "$links" --dir "$dir" \
			--replicas "$replicas" --agent "$(agent_for "$mode")" >"$dir.log" 2>&1; then
			na "$path" "$links" "$mode" all all all "fabric did not come up: $(tail -n 1 "$dir.log")"
			[[ ! -f $dir/fabric.json ]] || timeout 30 "$BIN/dpu-fabric" down --dir "$dir" >/dev/null 2>&1 || true
			FABRICS=()
			continue
		fi
		rings=failed
		if bounded 30 "$PEERLOAD" transport "$dir/node0/dpu0.sock" >"$WORK/out" 2>>"$WORK/peerload.err"; then
			rings=$(cat "$WORK/out")
		fi
		for transport in socket ring; do
			if [[ $transport == ring && $rings != transport=ring ]]; then
				if [[ $rings == failed ]]; then
					na "$path" "$links" "$mode" ring all all "transport probe failed"
				else
					why="agent offers no rings"
					[[ $LIBDPU_RINGS == yes ]] || why="$why; libdpu has no ring transport"
					na "$path" "$links" "$mode" ring all all "$why"
				fi
				continue
			fi
			rings_env=()
			[[ $transport == socket ]] && rings_env=(DPU_RINGS=0)
			for o in 0 1 2; do
				for c in $CLIENTS; do
					measure "$path" "$links" "$mode" "$transport" "${OWNERS[$o]}" "$c" -- \
						env "${rings_env[@]}" "${PL[@]}" -c "$c" \
						dpu "$dir/node0/dpu0.sock" "$dir/node$o/dpu0.sock"
				done
			done
			for c in $CLIENTS; do
				measure "$xfer" "$links" "$mode" "$transport" "1 hop" "$c" -- \
					env "${rings_env[@]}" "${PL[@]}" -c "$c" \
					transfer "$dir/node0/dpu0.sock" "$dir/node1/dpu0.sock"
			done
		done
		timeout 30 "$BIN/dpu-fabric" down --dir "$dir" >/dev/null 2>&1 || log "dpu-fabric down --dir $dir failed"
		FABRICS=()
	done
	done
done

# ---- Redis again: how much the machine changed during the run ----
for c in $CLIENTS; do
	measure "Redis Lua CAS (EVALSHA), again at the end" - - - - "$c" -- "${PL[@]}" -c "$c" redis "$HOST:$REDIS_PORT"
done

# ---- the table ----
rev=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD 2>/dev/null || rev="$rev+dirty"
echo
echo "bench-peers: $START, $SECONDS s, commit $rev, $(nproc) cores, load average $LOAD_START at the start, $(cut -d' ' -f1-3 /proc/loadavg) at the end, kernel $(uname -r)"
echo "peers: Redis $REDIS_VERSION, memcached $MC_VERSION; $SECS s per measurement after $WARM s warm-up (longer, by up to $EXTEND s, until 50 operations are done)$([[ $QUICK == 1 ]] && echo ' (BENCH_QUICK)')"
echo "loop modes: $(for m in $MODES; do l=$(mode_line "$m"); printf '%s = "%s"; ' "$m" "${l:-n/a}"; done)"
echo
awk -F'\t' '
function num(s) { return s ~ /^[0-9.]+$/ }
function ratio(a, b,   r) {
  if (!(num(a) && num(b) && b > 0)) return "n/a"
  r = a / b
  return r >= 0.1 ? sprintf("%.2f", r) : sprintf("%.2g", r)
}
{ rows[NR] = $0
  if ($1 == "SOCK_SEQPACKET echo (floor)" && !($6 in e50)) e50[$6] = $7
  if ($1 == "Redis Lua CAS (EVALSHA)" && !($6 in r50)) { r50[$6] = $7; r99[$6] = $8; rops[$6] = $9 } }
END {
  print "| path | links | loop | transport | owner | clients | p50 µs | p99 µs | ops/s | p50 ÷ Redis | p99 ÷ Redis | ops/s ÷ Redis | p50 ÷ echo | note |"
  print "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
  for (i = 1; i <= NR; i++) {
    split(rows[i], f, "\t")
    c = f[6]
    # The peers are divided by the first Redis EVALSHA row with as many
    # clients, every later row by the latest one above it (a Redis row by
    # the one before it: how much the machine changed); the same for the
    # echo and the p50 ÷ echo column.
    redis = f[1] ~ /^Redis Lua CAS \(EVALSHA\)/ && num(f[7])
    echo = f[1] ~ /^SOCK_SEQPACKET echo/ && num(f[7])
    if (num(f[7])) { a = ratio(f[7], r50[c]); b = ratio(f[8], r99[c]); o = ratio(f[9], rops[c]); e = ratio(f[7], e50[c]) }
    else { a = b = o = e = "n/a" }
    if (redis) { r50[c] = f[7]; r99[c] = f[8]; rops[c] = f[9] }
    if (echo) e50[c] = f[7]
    printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", f[1], f[2], f[3], f[4], f[5], c, f[7], f[8], f[9], a, b, o, e, f[10]
  }
}' "$ROWS"
[[ $BANDWIDTH == 0 ]] && exit 0
echo
echo "bandwidth: bulk stores and loads of $BULK_BYTES bytes (dpu_store, dpu_load) from node 1 of memory owned by node 0 of a 2-node UDP fabric; iperf3 over the same loopback"
echo
awk -F'\t' '
function num(s) { return s ~ /^[0-9.]+$/ }
function ratio(a, b,   r) {
  if (!(num(a) && num(b) && b > 0)) return "n/a"
  r = a / b
  return r >= 0.1 ? sprintf("%.2f", r) : sprintf("%.2g", r)
}
{ rows[NR] = $0
  if ($1 ~ /^iperf3 UDP/ && num($6)) udp = $6
  if ($1 ~ /^dpu bulk / && $3 == 1 && num($6)) one[$1 "/" $4 "/" $5] = $6 }
END {
  print "| path | links | channels | link crypto | clients | MB/s | ÷ iperf3 UDP | ÷ 1 channel | note |"
  print "|---|---|---|---|---|---|---|---|---|"
  for (i = 1; i <= NR; i++) {
    split(rows[i], f, "\t")
    o = f[1] ~ /^dpu bulk / ? ratio(f[6], one[f[1] "/" f[4] "/" f[5]]) : "n/a"
    printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", f[1], f[2], f[3], f[4], f[5], f[6], ratio(f[6], udp), o, f[7]
  }
}' "$BW_ROWS"
