# redis-helpers.bash — real Redis deployments for the tests/e2e/redis-*.bats
# suites, loaded after proxy_helpers: one server, a primary with a replica
# and three sentinels, a three-primary Redis Cluster, and two network
# namespaces ("hosts") joined to this one by veth pairs.  Every server runs
# on a free port, without persistence, in the test's directory; its pid
# goes to PIDS, so proxy_teardown stops it (SIGCONT first: a test may have
# stopped it).  Namespaces and links are removed by ns_teardown.  Every
# wait is bounded.

# redis_skip: skip unless redis-server and redis-cli are installed.
redis_skip() {
	command -v redis-server >/dev/null && command -v redis-cli >/dev/null ||
	    skip "redis-server is not installed"
}

# redis_wait PORT [HOST]: until the server answers (PONG or NOAUTH), 10 s.
redis_wait() {
	local i
	for i in $(seq 1 200); do
		redis-cli -h "${2:-127.0.0.1}" -p "$1" ping 2>&1 |
		    grep -qE 'PONG|NOAUTH' && return 0
		sleep 0.05
	done
	return 1
}

# redis_start NAME [redis-server options]: a server in $T/redis-NAME on
# $RPORT (default: a free port) bound to $RBIND (default 127.0.0.1); sets
# RPORT_<NAME> and RPID_<NAME>.  $RCONF, when set, is a config file given
# first (a sentinel needs one).
redis_start() {
	local name=$1 port=${RPORT:-$(free_port)} bind=${RBIND:-127.0.0.1}
	shift
	mkdir -p "$T/redis-$name"
	redis-server ${RCONF:+"$RCONF"} --port "$port" --bind $bind \
	    --dir "$T/redis-$name" --save '' --appendonly no --daemonize no \
	    --logfile redis.log "$@" >/dev/null 2>&1 3>&- &
	PIDS+=("$!")
	printf -v "RPID_$name" %s "$!"
	printf -v "RPORT_$name" %s "$port"
	redis_wait "$port" "${bind%% *}" || {
		echo "redis $name did not start:"
		tail -5 "$T/redis-$name/redis.log"
		return 1
	}
}

# redis_cluster_port: a free port whose cluster bus port (+10000) is free.
redis_cluster_port() {
	"$PY" -c '
import random, socket
def free(p):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p))
        return True
    except OSError:
        return False
    finally:
        s.close()
for _ in range(500):
    p = random.randint(20000, 50000)
    if free(p) and free(p + 10000):
        print(p)
        break'
}

# redis_cluster: three cluster-enabled primaries joined by
# `redis-cli --cluster create`; sets RPORT_c1..c3 and CLUSTER_URL.
redis_cluster() {
	local i p hosts=()
	for i in 1 2 3; do
		RPORT=$(redis_cluster_port) redis_start "c$i" \
		    --cluster-enabled yes --cluster-config-file nodes.conf \
		    --cluster-node-timeout 2000 || return 1
		eval "hosts+=(127.0.0.1:\$RPORT_c$i)"
	done
	redis-cli --cluster create "${hosts[@]}" --cluster-yes \
	    >"$T/cluster-create.out" 2>&1 </dev/null || {
		cat "$T/cluster-create.out"
		return 1
	}
	for i in 1 2 3; do
		eval "p=\$RPORT_c$i"
		wait_for 200 0.05 bash -c \
		    "redis-cli -p $p cluster info | grep -q cluster_state:ok" ||
		    return 1
	done
	CLUSTER_URL=redis+cluster://${hosts[0]},${hosts[1]}
}

# redis_sentinels MASTER: a primary (p), a replica (r) in sync and three
# sentinels (s1..s3, quorum 2, down after 400 ms) that know both and each
# other; sets SENTINEL_URL (database 0).
redis_sentinels() {
	local m=$1 i n hosts=()
	redis_start p || return 1
	redis_start r --replicaof 127.0.0.1 "$RPORT_p" || return 1
	wait_for 200 0.05 bash -c \
	    "redis-cli -p $RPORT_p info replication | grep -q connected_slaves:1" ||
	    return 1
	for i in 1 2 3; do
		mkdir -p "$T/redis-s$i"
		printf '%s\n' "sentinel monitor $m 127.0.0.1 $RPORT_p 2" \
		    "sentinel down-after-milliseconds $m 400" \
		    "sentinel failover-timeout $m 3000" >"$T/redis-s$i/s.conf"
		RCONF=$T/redis-s$i/s.conf redis_start "s$i" --sentinel ||
		    return 1
		eval "hosts+=(127.0.0.1:\$RPORT_s$i)"
	done
	SENTINEL_URL=redis+sentinel://$(IFS=,; echo "${hosts[*]}")/$m/0
	for i in 1 2 3; do
		eval "n=\$RPORT_s$i"
		wait_for 400 0.05 bash -c "redis-cli -p $n sentinel master $m |
		    grep -A1 -x num-other-sentinels | tail -1 | grep -qx 2 &&
		    redis-cli -p $n info sentinel | grep -q slaves=1" || {
			echo "sentinel s$i never saw the replica and the others"
			return 1
		}
	done
}

# sentinel_primary_port: the port the first sentinel names as primary.
sentinel_primary_port() {
	redis-cli -p "$RPORT_s1" sentinel get-master-addr-by-name "$1" | tail -1
}

# --- two hosts ---------------------------------------------------------------
# ns_setup: namespaces NS1 and NS2, each joined to this namespace by a veth
# pair in its own /30: here $H1_PEER and $H2_PEER, there $H1_ADDR and
# $H2_ADDR.  Needs root and ip(8); skips otherwise.
ns_setup() {
	[ "$(id -u)" = 0 ] || skip "network namespaces need root"
	command -v ip >/dev/null || skip "no ip(8)"
	local net i a
	NSTAG=sg$$r$((RANDOM % 1000))
	NS1=${NSTAG}a NS2=${NSTAG}b
	net=10.$((RANDOM % 200 + 20)).$((RANDOM % 250))
	H1_PEER=$net.1 H1_ADDR=$net.2 H2_PEER=$net.5 H2_ADDR=$net.6
	NS_MADE=()
	for i in 1 2; do
		eval "a=\$NS$i"
		ip netns add "$a" || return 1
		NS_MADE+=("$a")
		ip link add "${NSTAG}v$i" type veth peer name "${NSTAG}p$i" ||
			return 1
		ip link set "${NSTAG}p$i" netns "$a" || return 1
		eval "ip addr add \$H${i}_PEER/30 dev ${NSTAG}v$i" || return 1
		ip link set "${NSTAG}v$i" up || return 1
		eval "ip -n $a addr add \$H${i}_ADDR/30 dev ${NSTAG}p$i" ||
			return 1
		ip -n "$a" link set "${NSTAG}p$i" up || return 1
		ip -n "$a" link set lo up || return 1
	done
}

ns_teardown() {
	local a i
	for a in "${NS_MADE[@]}"; do
		ip netns del "$a" 2>/dev/null || true
	done
	for i in 1 2; do
		ip link del "${NSTAG}v$i" 2>/dev/null || true
	done
	NS_MADE=()
}

# start_at TAG NETNS ADDR ROLE [sg-proxy options]: sg-proxy --role ROLE
# listening on ADDR (in NETNS; "-" for this namespace); waits for /readyz.
# Sets AT_PID and AT_URL.
start_at() {
	local tag=$1 ns=$2 addr=$3 role=$4 i code= pre=()
	shift 4
	[ "$ns" = - ] || pre=(ip netns exec "$ns")
	rm -f "$T/$tag.port"
	"${pre[@]}" "$PROXY" --role "$role" --listen "$addr:0" \
	    --port-file "$T/$tag.port" "$@" >"$T/$tag.out" 2>"$T/$tag.err" 3>&- &
	AT_PID=$!
	PIDS+=("$!")
	wait_file "$T/$tag.port" || { cat "$T/$tag.err"; return 1; }
	AT_URL=http://$addr:$(cat "$T/$tag.port")
	for i in $(seq 1 100); do
		code=$(curl -s --max-time 2 -o /dev/null -w '%{http_code}' \
		    "$AT_URL/readyz") || true
		[ "$code" = 200 ] && return 0
		sleep 0.1
	done
	echo "sg-proxy $tag never became ready ($code):"
	cat "$T/$tag.err"
	return 1
}

# rlc_get URL KEY: the cluster id the Redis store URL holds for KEY.
rlc_get() {
	"$BIN/sg-lastcluster" -d "$1" get "$2" 2>/dev/null || true
}

# rlc_wait URL KEY VALUE: until the store maps KEY to VALUE (5 s).
rlc_wait() {
	local i
	for i in $(seq 1 100); do
		[ "$(rlc_get "$1" "$2")" = "$3" ] && return 0
		sleep 0.05
	done
	echo "store $1: $2 is '$(rlc_get "$1" "$2")', not '$3'"
	return 1
}

# gw_metric URL NAME [LABEL...]: msum over URL's /metrics.
gw_metric() {
	local u=$1
	shift
	METRICS=$(curl -sS --max-time 5 "$u/metrics") msum "$@"
}

# client_loop FILE BODY URL: POST BODY to URL's chat endpoint every 50 ms
# (at most 1200 times) until $T/stop-loop exists, one status per line in
# FILE.  Start it with `client_loop ... & LOOP_PID=$!; PIDS+=($LOOP_PID)`.
client_loop() {
	local i
	for i in $(seq 1 1200); do
		[ -e "$T/stop-loop" ] && break
		curl -s -o /dev/null -w '%{http_code}\n' --max-time 10 \
		    -H 'content-type: application/json' --data-binary "$2" \
		    "$3/v1/chat/completions" >>"$1" 2>/dev/null ||
		    echo 000 >>"$1"
		sleep 0.05
	done
}

# loop_stop: end the client loop and wait for it; fails unless it made at
# least one request and every one was answered 200.
loop_stop() {
	touch "$T/stop-loop"
	wait "$LOOP_PID" 2>/dev/null || true
	echo "client loop: $(wc -l <"$T/loop.status") requests," \
	    "$(grep -vcx 200 "$T/loop.status") not 200"
	[ -s "$T/loop.status" ]
	! grep -vqx 200 "$T/loop.status"
}
