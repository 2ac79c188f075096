#!/usr/bin/env bash
# tools/demo.sh — the main job (`make demo`): a narrated session that shows
# how Stargate places new and returning chat sessions.
#
# Acts 1-8 walk through the decisions with the tools over the bundled
# example fleet in tools/demo/: three clusters serving llama-3-70b for
# routing key "acme"; the session's cache affinity key "chat-16" ranks
# us-east first, us-west second and eu-central (80 ms away) third, both in
# the pulsar ranking and on the wait-and-widen ring (the key was chosen by
# computing the orders, and the demo prints the order sg-route --explain
# reports, so nothing is assumed).  Acts 9 and 10 (tools/demo/live.sh) run
# the whole stack on loopback: three sg-mockengine clusters behind one
# sg-proxy --role all with the last-cluster store in $O/demo/store, driven
# by the official openai npm client (installed into $O/openai), first with
# the feature on and then off; the demo stops everything it started.
#
# O names the build directory (binaries in $O/bin).  Needs jq, curl, node
# and npm (npm only until the client is installed).  Exits 0.
set -euo pipefail
cd "$(dirname "$0")/.."
O=${O:-build}
ROUTE=$O/bin/sg-route
CLASSIFY=$O/bin/sg-classify
LASTCLUSTER=$O/bin/sg-lastcluster
SIM=$O/bin/sg-sim
D=tools/demo

for p in "$ROUTE" "$CLASSIFY" "$LASTCLUSTER" "$SIM" "$O/bin/sg-proxy" \
    "$O/bin/sg-mockengine"; do
	if [ ! -x "$p" ]; then
		echo "demo: $p is not built; run make first" >&2
		exit 1
	fi
done
command -v jq >/dev/null || { echo "demo: needs jq" >&2; exit 1; }
command -v curl >/dev/null || { echo "demo: needs curl" >&2; exit 1; }

FLAG_ON=$D/lb-config.json
FLAG_OFF=$D/lb-config-flag-off.json

# --- presentation ----------------------------------------------------------

bold=$(tput bold 2>/dev/null || true)
plain=$(tput sgr0 2>/dev/null || true)
[ -t 1 ] || { bold=; plain=; }

act() { printf '\n%s== %s ==%s\n\n' "$bold" "$*" "$plain"; }
say() { printf '%s\n' "$*" | fold -s -w 78; }
cmd() { printf '  $ %s\n' "$*"; }

# One line per decision.
JQ_DECISION='
def pad($n): tostring | if length < $n then . + (" " * ($n - length)) else . end;
"    " + (.request_id | pad(7)) + " at " + ((.elapsed_ms | tostring) + " ms" | pad(7)) + "  "
+ (if .decision == "select" then
     ("select " + .cluster_id | pad(18)) + "rank " + (.rank_depth | tostring)
     + (if .phase then " (" + .phase + " phase)" else "" end)
   elif .decision == "wait" then
     "wait, decide again at " + (.recheck_at_ms | tostring) + " ms"
   else "reject " + (.status | tostring) + " " + .code end)
+ (if .session_state then
     "   [" + .session_state
     + (if .promoted then ", promoted" else "" end)
     + (if .selection then ", " + .selection else "" end) + "]"
   else "" end)'

decisions() { jq -r "$JQ_DECISION"; }

# The fleet as a table.
fleet() {
	jq -r '
	def pad($n): tostring | if length < $n then . + (" " * ($n - length)) else . end;
	"    cluster     slots   queued  rtt",
	(.clusters[] | "    " + (.id | pad(11)) + " "
	  + ((.running | tostring) + "/" + (.max_engine_concurrency | tostring) | pad(7)) + " "
	  + (.queued | pad(7)) + " " + (.rtt_ms | tostring) + " ms"
	  + (if .running >= .max_engine_concurrency then "   <- full" else "" end))' "$1"
}

# route CONFIG SNAPSHOT [sg-route options] < request
route() {
	local conf=$1 snap=$2
	shift 2
	"$ROUTE" -c "$conf" -s "$snap" "$@"
}

# --- the session -------------------------------------------------------------

act "Stargate demo: where does a chat request go?"
say "sg-route runs the same decision engine as the proxy on a snapshot of the \
fleet and one request, and prints the decision as JSON.  The model \
llama-3-70b uses pulsar-wait-and-widen: rank 1 of the session's ranking \
first, wait up to 300 ms (cache_affinity_wait_ms) for it, then widen.  With \
last_cluster_affinity on, a session that has been here before (the gateway \
sends x-stargate-last-cluster-id) goes back to the cluster holding its KV \
cache; a new session has no cache anywhere, so it does not wait."
echo
order=$(route "$FLAG_ON" "$D/fleet-east-drained.json" --explain "$D/session-first.json" |
	jq -r '.explain.original_order | join(" > ")')
say "The session (cache affinity key chat-16) ranks the clusters:"
printf '    %s\n' "$order"

act "1. A new session, and its rank-1 cluster is full"
fleet "$D/fleet-east-full.json"
echo
cmd "sg-route -c $FLAG_ON -s $D/fleet-east-full.json $D/session-first.json"
route "$FLAG_ON" "$D/fleet-east-full.json" "$D/session-first.json" | decisions
echo
say "No last cluster, so the session is new: it overflows to the best cluster \
that is free now, at 0 ms, without holding for us-east."

act "2. The same request with last_cluster_affinity off"
cmd "sg-route -c $FLAG_OFF -s $D/fleet-east-full.json --until-decided $D/session-first.json"
route "$FLAG_OFF" "$D/fleet-east-full.json" --until-decided "$D/session-first.json" | decisions
echo
say "Without the session rules every request holds 300 ms for its rank-1 \
cluster, although a new session gains nothing from waiting."

act "3. us-east drains; the session's next turn names its last cluster"
fleet "$D/fleet-east-drained.json"
echo
cmd "sg-route -c $FLAG_ON -s $D/fleet-east-drained.json $D/session-next.json"
route "$FLAG_ON" "$D/fleet-east-drained.json" "$D/session-next.json" | decisions
cmd "sg-route -c $FLAG_OFF -s $D/fleet-east-drained.json $D/session-next.json"
route "$FLAG_OFF" "$D/fleet-east-drained.json" "$D/session-next.json" | decisions
echo
say "With the flag on, us-west is promoted to the front of the session's \
order and the turn stays with its KV cache.  With the flag off the turn goes \
back to us-east, where the cache is cold: cache thrash."

act "4. Ten more turns, both algorithms, flag on and off (one NDJSON stream each)"
stream() {
	printf '{"snapshot": %s}\n' "$(jq -c . "$D/fleet-east-drained.json")"
	for i in $(seq 3 12); do
		jq -c --arg id "req-$i" --arg m "$1" \
		    '{request: (.request_id = $id | if $m == "" then . else .routing_method = $m end)}' \
		    "$D/session-next.json"
	done
}
say "Each stream is the drained fleet, then req-3 .. req-12 with last cluster \
us-west (routing_method picks the algorithm):"
cmd "sg-route -c lb-config.json --ndjson turns.ndjson | jq -r .cluster_id | sort | uniq -c"
for alg in pulsar-wait-and-widen wait-and-widen; do
	m=$([ "$alg" = wait-and-widen ] && echo wait-and-widen || true)
	for conf in "$FLAG_ON" "$FLAG_OFF"; do
		flag=$([ "$conf" = "$FLAG_ON" ] && echo on || echo off)
		tally=$(stream "$m" | "$ROUTE" -c "$conf" --ndjson |
			jq -rs 'group_by(.cluster_id) | map("\(length) to \(.[0].cluster_id)") | join(", ")')
		printf '    %-22s flag %-4s %s\n' "$alg" "$flag" "$tally"
	done
done

act "5. The last cluster is busy: a returning session waits for it"
fleet "$D/fleet-west-full.json"
echo
say "us-west is full and us-east is free.  The request waits for us-west (up \
to 300 ms).  Here a slot on us-west frees at 120 ms:"
cmd "sg-route -c $FLAG_ON --ndjson   # snapshot, request at 0 ms, new snapshot, request at 120 ms"
{
	printf '{"snapshot": %s}\n' "$(jq -c . "$D/fleet-west-full.json")"
	jq -c '{request: .}' "$D/session-next.json"
	printf '{"snapshot": %s}\n' "$(jq -c . "$D/fleet-west-frees.json")"
	jq -c '{request: (.elapsed_ms = 120)}' "$D/session-next.json"
} | "$ROUTE" -c "$FLAG_ON" --ndjson | decisions
echo
say "If us-west never frees, the request widens after 300 ms:"
cmd "sg-route -c $FLAG_ON -s $D/fleet-west-full.json --until-decided $D/session-next.json"
route "$FLAG_ON" "$D/fleet-west-full.json" --until-decided "$D/session-next.json" | decisions

act "6. Why: sg-route --explain"
cmd "sg-route -c $FLAG_ON -s $D/fleet-east-drained.json --explain $D/session-next.json"
route "$FLAG_ON" "$D/fleet-east-drained.json" --explain "$D/session-next.json" | jq -r '
def pad($n): tostring | if length < $n then . + (" " * ($n - length)) else . end;
def num: if . == null then "inf" else (. * 10 | round / 10 | tostring) end;
.explain as $e
| "    session " + $e.session.state + ", last cluster " + $e.session.last_cluster_id
  + (if $e.session.promoted then " (promoted)" else "" end),
  "    affinity wait X = \($e.x_ms) ms, prefill scale s = \($e.scale)",
  "    original order:  " + ($e.original_order | join(" > ")),
  "    effective order: " + ($e.effective_order | join(" > ")),
  "    affinity group:  " + ($e.affinity_group | join(", ")),
  "",
  "    cluster     rank  queue_ms  prefill_ms  ttft_ms  capacity",
  ($e.candidates | sort_by(.affinity_rank)[]
   | "    " + (.cluster_id | pad(11)) + " " + (.affinity_rank | pad(5)) + " "
     + (.queue_ms | num | pad(9)) + " " + (.prefill_ms | num | pad(11)) + " "
     + (.ttft_ms | num | pad(8)) + " " + (if .has_capacity then "yes" else "no" end)),
  "",
  "    -> " + .decision + " " + (.cluster_id // "") + " (" + (.selection // "") + ")"'
echo
say "The discount s applies inside the affinity group only: us-west prefills \
2400 tokens at 10% (12 ms) because its cache is warm."

act "7. The gateway's memory: the last cluster of each session"
say "The gateway stage turns an OpenAI request into a session identity, and \
remembers which cluster served the session's last turn in the last-cluster \
store (LMDB, shared by every proxy process on the host), keyed by a hash: \
raw keys never reach the store."
CHAT=$D/chat-turn.json
cmd "sg-classify $CHAT"
"$CLASSIFY" "$CHAT" | jq -r '"    source \(.source) (eligible: \(.eligible)), routing key \(.routing_key), model \(.model)",
  "    cache affinity key \(.cache_affinity_key[0:30])...",
  "    store key          \(.store_key[0:30])...",
  "    input tokens (estimate) \(.input_tokens)"'
STORE=$(mktemp -d)
STACK_PROG=demo STACK_DIR=$O/demo
. tools/demo/stack.sh
. tools/demo/live.sh
trap 'stack_stop; rm -rf "$STORE"' EXIT
key=$("$CLASSIFY" "$CHAT" | jq -r .store_key)
say "The response to the first turn came from us-west (x-stargate-cluster-id), \
so the gateway writes it; the next turn looks it up and sends it to the \
router as the hint x-stargate-last-cluster-id:"
cmd "sg-lastcluster -d \$STORE put \$(sg-classify $CHAT | jq -r .store_key) us-west"
"$LASTCLUSTER" -d "$STORE" put "$key" us-west
cmd "sg-lastcluster -d \$STORE get \$(sg-classify $CHAT | jq -r .store_key)"
printf '    %s\n' "$("$LASTCLUSTER" -d "$STORE" get "$key")"
cmd "sg-lastcluster -d \$STORE stats | jq -c '{entries, ttl_ms, max_entries}'"
printf '    %s\n' "$("$LASTCLUSTER" -d "$STORE" stats | jq -c '{entries, ttl_ms, max_entries}')"
say "Entries expire after the TTL (10 minutes by default); cron or a systemd \
timer runs sg-lastcluster compact (tools/deploy/)."

act "8. What it buys: a simulated cache-thrash episode"
say "sg-sim drives the same algorithms in virtual time against clusters with \
a KV-cache model.  In the cache-thrash scenario the rank-1 cluster of many \
sessions is saturated by other traffic for a while, then drains.  left_last \
is the share of returning requests that left their last cluster:"
cmd "sg-sim tools/sim/scenarios/cache-thrash.json"
"$SIM" tools/sim/scenarios/cache-thrash.json | sed 's/^/  /'
echo
"$SIM" --json tools/sim/scenarios/cache-thrash.json | jq -r '
  def pct: . * 1000 | round / 10 | tostring + "%";
  .rows as $r
  | ["wait-and-widen", "pulsar-wait-and-widen"][] as $a
  | ($r[] | select(.algorithm == $a and .last_cluster_affinity == false)) as $off
  | ($r[] | select(.algorithm == $a and .last_cluster_affinity == true)) as $on
  | "  \($a): left their last cluster \($off.left_last_cluster_share | pct) -> \($on.left_last_cluster_share | pct), KV reuse \($off.kv_reuse | pct) -> \($on.kv_reuse | pct), TTFT p99 \($off.ttft_p99_ms | round) -> \($on.ttft_p99_ms | round) ms"'
echo
say "With last_cluster_affinity on, returning sessions stay with their KV \
cache."

# Acts 9, 10 and the tally: tools/demo/live.sh.
live_acts

act "Try it"
say "Every step above is one program call over files in tools/demo/ (see \
sg-route(1), sg-classify(1), sg-lastcluster(1), sg-sim(1) and README.md).  For example:"
cmd "$ROUTE -c $FLAG_ON -s $D/fleet-east-full.json --explain $D/session-first.json | jq .explain"
echo
