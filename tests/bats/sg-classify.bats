#!/usr/bin/env bats
# sg-classify(1): every session source and the precedence rules, session id
# validation (exit 65 with the 400 message), the mt:v1 and lc:v1 keys
# (computed here independently with sha256sum), model id errors, token
# estimates, the router-side classification (new, returning, stale) with a
# snapshot and an lb-config, the header rules for x-stargate-last-cluster-id
# (one answer with sg-route for a control character: new), --request (the
# routing request sg-route reads, and the pipeline into sg-route), --store
# (hit, miss, TTL, skipped sessions, the environment), NDJSON mode, and
# every exit status.
#
# Affinity orders depend on XXH3 of the mt:v1 key, so the router tests do
# not assume one: they read original_order from a first run and pick the
# hint (or build the snapshot) from it.

bats_require_minimum_version 1.5.0

setup() {
	BIN=${SG_BINDIR:-$BATS_TEST_DIRNAME/../../build/san/bin}
	CL=$BIN/sg-classify
	F=$BATS_TEST_DIRNAME/../fixtures/sg-classify
	MAN=$BATS_TEST_DIRNAME/../../man/sg-classify.1
	export LC_ALL=C
}

# j FILTER: jq -r over the captured output.
j() {
	jq -r "$1" <<<"$output"
}

# sha TEXT: lowercase hex SHA-256 of the bytes of TEXT.
sha() {
	printf '%s' "$1" | sha256sum | cut -c1-64
}

# be64 N: N as 8 big-endian bytes, in printf escape form.
be64() {
	local n=$1 i out=""
	for i in 56 48 40 32 24 16 8 0; do
		out+=$(printf '\\x%02x' $(((n >> i) & 255)))
	done
	printf '%s' "$out"
}

# lckey RK MODEL AK: the store key, built by hand from the layout of sg-lastcluster(1).
lckey() {
	local h
	h=$({ printf "$(be64 ${#1})"; printf '%s' "$1"
	      printf "$(be64 ${#2})"; printf '%s' "$2"
	      printf "$(be64 ${#3})"; printf '%s' "$3"; } | sha256sum | cut -c1-64)
	printf 'lc:v1:%s' "$h"
}

# --- usage, help, version ---------------------------------------------------

@test "--help prints usage on stdout and exits 0" {
	run -0 --separate-stderr "$CL" --help
	[[ $output == usage:\ sg-classify* ]]
	[[ $output == *--headers-file* ]]
	[ -z "$stderr" ]
}

@test "-h is --help" {
	run -0 --separate-stderr "$CL" -h
	[[ $output == usage:\ sg-classify* ]]
}

@test "--version prints 'sg-classify 0.1.0'" {
	run -0 --separate-stderr "$CL" --version
	[ "$output" = "sg-classify 0.1.0" ]
}

@test "--help lists every option man/sg-classify.1 documents, and back" {
	run -0 --separate-stderr "$CL" --help
	man_opts=$(grep -oE 'Fl \\-[a-z][a-z-]+' "$MAN" | sed 's/Fl \\-/--/' | sort -u)
	[ -n "$man_opts" ]
	for o in $man_opts; do
		grep -qF -- "$o" <<<"$output" || { echo "missing in --help: $o"; false; }
	done
	for o in $(grep -oE -- '--[a-z][a-z-]+' <<<"$output" | sort -u); do
		grep -qF -- "Fl \\${o#-}" "$MAN" || { echo "missing in man: $o"; false; }
	done
	for s in c H h s; do
		grep -qE "^\.It Fl $s( |$)" "$MAN" || { echo "missing in man: -$s"; false; }
		grep -qE -- "-$s, --" <<<"$output" || { echo "missing in --help: -$s"; false; }
	done
}

@test "an unknown option is a usage error (64) with usage on stderr" {
	run -64 --separate-stderr "$CL" --frobnicate "$F/chat-pck.json"
	[ -z "$output" ]
	[[ $stderr == *usage:\ sg-classify* ]]
}

@test "-H without a colon is a usage error (64)" {
	run -64 --separate-stderr "$CL" -H 'x-multi-turn-session-id hdr-7' "$F/chat-pck.json"
	[[ $stderr == *"-H: expected 'name: value'"* ]]
	[ -z "$output" ]
}

@test "an unknown --endpoint is a usage error (64)" {
	run -64 --separate-stderr "$CL" --endpoint chat_completions "$F/chat-pck.json"
	[[ $stderr == *"--endpoint: expected chat, completions, responses or embeddings"* ]]
}

@test "router options without -s are a usage error (64)" {
	run -64 --separate-stderr "$CL" --last-cluster B "$F/chat-pck.json"
	[[ $stderr == *"need -s snapshot.json"* ]]
	run -64 --separate-stderr "$CL" -c "$F/lb-waw-flag.json" "$F/chat-pck.json"
	run -64 --separate-stderr "$CL" --routing-method pulsar "$F/chat-pck.json"
}

@test "a bad --elapsed-ms or --seed is a usage error (64)" {
	run -64 --separate-stderr "$CL" -s "$F/abc-free.json" --elapsed-ms -5 "$F/chat-pck.json"
	run -64 --separate-stderr "$CL" -s "$F/abc-free.json" --seed x "$F/chat-pck.json"
}

@test "two operands are a usage error (64)" {
	run -64 --separate-stderr "$CL" "$F/chat-pck.json" "$F/chat-pck.json"
	[[ $stderr == *"at most one input operand"* ]]
}

# --- sources ------------------------------------------------------------------

@test "prompt_cache_key: source, eligible, mt:v1 key and lc:v1 store key" {
	run -0 --separate-stderr "$CL" "$F/chat-pck.json"
	[ -z "$stderr" ]
	[ "$(j .endpoint)" = chat ]
	[ "$(j .routing_key)" = tenant-a ]
	[ "$(j .model)" = llama ]
	[ "$(j .source)" = prompt_cache_key ]
	[ "$(j .eligible)" = true ]
	[ "$(j .session_id)" = sess-1 ]
	ak="mt:v1:session:$(sha sess-1)"
	[ "$(j .cache_affinity_key)" = "$ak" ]
	[ "$(j .store_key)" = "$(lckey tenant-a llama "$ak")" ]
	[ "$(j 'has("routing")')" = false ]
}

@test "the store key binds routing key, model and affinity key (fixed vector)" {
	# printf 'sess-1' | sha256sum, then the length-prefixed triple by hand:
	# see tests/unit/test_identity.c for the derivation.
	run -0 --separate-stderr "$CL" "$F/chat-pck.json"
	[ "$(j .store_key)" = "lc:v1:8121ec116a23fd87345f6102a2400f5f262d3b81b28ce5fc4c4b0d6cce6e49e9" ]
	[ "$(j .cache_affinity_key)" = "mt:v1:session:abe633f3a47a2758174eabe9160daf36c4b1a33e8642ebf96e8f91c3fcbd5f9c" ]
}

@test "store_key equals 'sg-lastcluster key' for the same session" {
	run -0 --separate-stderr "$CL" "$F/chat-pck.json"
	sk=$(j .store_key)
	ak=$(j .cache_affinity_key)
	[[ $sk == lc:v1:* ]]
	run -0 --separate-stderr "$BIN/sg-lastcluster" key tenant-a llama "$ak"
	[ "$output" = "$sk" ]
	# and for a header session
	run -0 --separate-stderr "$CL" -H 'x-multi-turn-session-id: hdr-7' "$F/chat-payload.json"
	sk=$(j .store_key)
	run -0 --separate-stderr "$BIN/sg-lastcluster" key tenant-a llama "$(j .cache_affinity_key)"
	[ "$output" = "$sk" ]
}

@test "Responses conversation id (string): source conversation_id, eligible" {
	run -0 --separate-stderr "$CL" --endpoint responses "$F/responses-conv.json"
	[ "$(j .endpoint)" = responses ]
	[ "$(j .source)" = conversation_id ]
	[ "$(j .eligible)" = true ]
	[ "$(j .session_id)" = conv_abc ]
	ak="mt:v1:session:$(sha conv_abc)"
	[ "$(j .cache_affinity_key)" = "$ak" ]
	[ "$(j .store_key)" = "$(lckey tenant-a llama "$ak")" ]
}

@test "Responses conversation id (object with id): same key as the string" {
	run -0 --separate-stderr "$CL" --endpoint responses "$F/responses-conv-obj.json"
	[ "$(j .source)" = conversation_id ]
	[ "$(j .cache_affinity_key)" = "mt:v1:session:$(sha conv_abc)" ]
}

@test "x-multi-turn-session-id header: trimmed, source header, eligible" {
	run -0 --separate-stderr "$CL" -H 'X-Multi-Turn-Session-Id:   hdr-7  ' "$F/chat-payload.json"
	[ "$(j .source)" = header ]
	[ "$(j .eligible)" = true ]
	[ "$(j .session_id)" = hdr-7 ]
	ak="mt:v1:session:$(sha hdr-7)"
	[ "$(j .cache_affinity_key)" = "$ak" ]
	[ "$(j .store_key)" = "$(lckey tenant-a llama "$ak")" ]
}

@test "a header already in mt:v1:<x>:<64 hex> form is used verbatim" {
	key="mt:v1:session:$(sha upstream)"
	run -0 --separate-stderr "$CL" -H "x-multi-turn-session-id: $key" "$F/chat-payload.json"
	[ "$(j .cache_affinity_key)" = "$key" ]
	# five parts: not the form, so it is hashed like any id
	odd="mt:v1:a:b:$(sha upstream)"
	run -0 --separate-stderr "$CL" -H "x-multi-turn-session-id: $odd" "$F/chat-payload.json"
	[ "$(j .cache_affinity_key)" = "mt:v1:session:$(sha "$odd")" ]
}

@test "payload session: key of the compact messages JSON, never eligible, no store key" {
	run -0 --separate-stderr "$CL" "$F/chat-payload.json"
	[ "$(j .source)" = payload ]
	[ "$(j .eligible)" = false ]
	[ "$(j .store_key)" = null ]
	ak="mt:v1:payload:$(sha '[{"role":"user","content":"hi"}]')"
	[ "$(j .cache_affinity_key)" = "$ak" ]
	[ "$(j .session_id)" = "$ak" ]
	# Responses: the input
	run -0 --separate-stderr "$CL" --endpoint responses "$F/responses-input.json"
	[ "$(j .source)" = payload ]
	[ "$(j .eligible)" = false ]
	[ "$(j .cache_affinity_key)" = "mt:v1:payload:$(sha '"hello"')" ]
}

@test "--headers-file: request line names the endpoint, headers are read" {
	run -0 --separate-stderr "$CL" --headers-file "$F/headers-responses.txt" "$F/responses-input.json"
	[ "$(j .endpoint)" = responses ]
	[ "$(j .source)" = header ]
	[ "$(j .session_id)" = hdr-7 ]
	# --endpoint wins over the request line
	run -0 --separate-stderr "$CL" --endpoint chat --headers-file "$F/headers-responses.txt" "$F/responses-input.json"
	[ "$(j .endpoint)" = chat ]
}

@test "completions and embeddings have no session, whatever the body says" {
	run -0 --separate-stderr "$CL" --endpoint embeddings -H 'x-multi-turn-session-id: hdr-7' "$F/embeddings.json"
	[ "$(j .source)" = null ]
	[ "$(j .eligible)" = false ]
	[ "$(j .cache_affinity_key)" = null ]
	[ "$(j .store_key)" = null ]
	run -0 --separate-stderr "$CL" --endpoint completions "$F/completions.json"
	[ "$(j .source)" = null ]
	[ "$(j .session_id)" = null ]
}

# --- precedence ---------------------------------------------------------------

@test "chat: prompt_cache_key wins over the header" {
	run -0 --separate-stderr "$CL" -H 'x-multi-turn-session-id: hdr-7' "$F/chat-pck.json"
	[ "$(j .source)" = prompt_cache_key ]
	[ "$(j .session_id)" = sess-1 ]
}

@test "chat: conversation is not a chat source, the header wins" {
	run -0 --separate-stderr "$CL" -H 'x-multi-turn-session-id: hdr-7' "$F/chat-conv-only.json"
	[ "$(j .source)" = header ]
	run -0 --separate-stderr "$CL" "$F/chat-conv-only.json"
	[ "$(j .source)" = payload ]
}

@test "Responses: prompt_cache_key > conversation id > header > payload" {
	run -0 --separate-stderr "$CL" --endpoint responses -H 'x-multi-turn-session-id: hdr-7' "$F/responses-pck-conv.json"
	[ "$(j .source)" = prompt_cache_key ]
	run -0 --separate-stderr "$CL" --endpoint responses -H 'x-multi-turn-session-id: hdr-7' "$F/responses-conv.json"
	[ "$(j .source)" = conversation_id ]
	run -0 --separate-stderr "$CL" --endpoint responses -H 'x-multi-turn-session-id: hdr-7' "$F/responses-input.json"
	[ "$(j .source)" = header ]
	run -0 --separate-stderr "$CL" --endpoint responses "$F/responses-input.json"
	[ "$(j .source)" = payload ]
}

@test "a blank header is absent: the payload is the source" {
	run -0 --separate-stderr "$CL" -H 'x-multi-turn-session-id:    ' "$F/chat-payload.json"
	[ "$(j .source)" = payload ]
}

# --- validation (exit 65 with the 400 message) --------------------------------

@test "header with a control byte: exit 65, the 400 message" {
	run -65 --separate-stderr "$CL" -H $'x-multi-turn-session-id: a\x01b' "$F/chat-pck.json"
	[ "$stderr" = "sg-classify: x-multi-turn-session-id is invalid: contains a control character" ]
	[ -z "$output" ]
}

@test "header with 0x7F: exit 65" {
	run -65 --separate-stderr "$CL" -H $'x-multi-turn-session-id: a\x7fb' "$F/chat-payload.json"
	[ "$stderr" = "sg-classify: x-multi-turn-session-id is invalid: contains a control character" ]
}

@test "header longer than 256 bytes: exit 65; 256 bytes is fine" {
	long=$(printf 'h%.0s' $(seq 257))
	run -65 --separate-stderr "$CL" -H "x-multi-turn-session-id: $long" "$F/chat-payload.json"
	[ "$stderr" = "sg-classify: x-multi-turn-session-id is invalid: exceeds 256 bytes" ]
	run -0 --separate-stderr "$CL" -H "x-multi-turn-session-id: ${long:1}" "$F/chat-payload.json"
	[ "$(j .source)" = header ]
}

# Regression (issue 12): 257 headers exited 70 (internal error).
@test "header count limit: 256 headers are classified; 257 exit 65 with its message (-H, --headers-file, an NDJSON record)" {
	local i a=() hf=$BATS_TEST_TMPDIR/h.txt
	for i in $(seq 1 256); do
		a+=(-H "x-h$i: v")
		printf 'x-h%d: v\n' "$i"
	done >"$hf"
	run -0 --separate-stderr "$CL" "${a[@]}" "$F/chat-payload.json"
	run -0 --separate-stderr "$CL" --headers-file "$hf" "$F/chat-payload.json"
	run -65 --separate-stderr "$CL" "${a[@]}" -H "x-h257: v" "$F/chat-payload.json"
	[ "$stderr" = "sg-classify: -H: more than 256 headers" ]
	echo "x-h257: v" >>"$hf"
	run -65 --separate-stderr "$CL" --headers-file "$hf" "$F/chat-payload.json"
	[[ $stderr == *"more than 256 headers" ]]
	[[ $stderr != *"memory"* ]]
	# a record's headers count together with -H
	jq -nc '{body: {model: "tenant-a/llama", messages: []},
	    headers: ([range(1; 130)] | map({key: "x-r\(.)", value: "v"})
	    | from_entries)}' >"$BATS_TEST_TMPDIR/s.ndjson"
	run -0 --separate-stderr "$CL" --ndjson "${a[@]:0:254}" "$BATS_TEST_TMPDIR/s.ndjson"
	run -65 --separate-stderr "$CL" --ndjson "${a[@]}" "$BATS_TEST_TMPDIR/s.ndjson"
	[[ $stderr == *"more than 256 headers" ]]
	grep -q 'more than 256 headers' "$MAN"
}

@test "the header is validated first, even when prompt_cache_key wins" {
	run -65 --separate-stderr "$CL" -H $'x-multi-turn-session-id: a\x1fb' "$F/chat-pck.json"
	[[ $stderr == *"x-multi-turn-session-id is invalid"* ]]
}

@test "prompt_cache_key with a control byte, 0x7F, or too long: exit 65" {
	run -65 --separate-stderr "$CL" "$F/chat-bad-pck-ctrl.json"
	[ "$stderr" = "sg-classify: session id from prompt_cache_key is invalid: contains a control character" ]
	run -65 --separate-stderr "$CL" "$F/chat-bad-pck-del.json"
	[ "$stderr" = "sg-classify: session id from prompt_cache_key is invalid: contains a control character" ]
	run -65 --separate-stderr "$CL" "$F/chat-bad-pck-long.json"
	[ "$stderr" = "sg-classify: session id from prompt_cache_key is invalid: exceeds 256 bytes" ]
}

@test "an invalid conversation id: exit 65 naming conversation_id" {
	run -65 --separate-stderr "$CL" --endpoint responses "$F/responses-bad-conv.json"
	[ "$stderr" = "sg-classify: session id from conversation_id is invalid: contains a control character" ]
}

@test "error messages never carry the session id" {
	run -65 --separate-stderr "$CL" -H $'x-multi-turn-session-id: SECRET\x01' "$F/chat-payload.json"
	[[ $stderr != *SECRET* ]]
}

# --- model id -------------------------------------------------------------------

@test "model id errors: exit 65 with each 400 message" {
	run -65 --separate-stderr "$CL" "$F/chat-no-model.json"
	[ "$stderr" = "sg-classify: model is required" ]
	run -65 --separate-stderr "$CL" "$F/chat-no-prefix.json"
	[ "$stderr" = "sg-classify: model prefix is required" ]
	run -65 --separate-stderr "$CL" "$F/chat-empty-rk.json"
	[ "$stderr" = "sg-classify: routing key is required before model" ]
	run -65 --separate-stderr "$CL" "$F/chat-empty-model.json"
	[ "$stderr" = "sg-classify: model suffix is required after routing key" ]
	run -65 --separate-stderr "$CL" --routing-key tenant-b "$F/chat-pck.json"
	[ "$stderr" = "sg-classify: model targets a different routing key" ]
}

@test "--routing-key that matches the model id is accepted" {
	run -0 --separate-stderr "$CL" --routing-key tenant-a "$F/chat-pck.json"
	[ "$(j .routing_key)" = tenant-a ]
}

@test "a UUID routing key is lower-cased (and so is its store key)" {
	run -0 --separate-stderr "$CL" "$F/chat-uuid.json"
	rk=0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9
	[ "$(j .routing_key)" = "$rk" ]
	[ "$(j .store_key)" = "$(lckey "$rk" llama "mt:v1:session:$(sha sess-1)")" ]
}

# --- token estimate ---------------------------------------------------------------

@test "input_tokens: hand-computed chat, Responses, embeddings, completions" {
	# one message "hi": 3 + 2 + (5 + 1)
	run -0 --separate-stderr "$CL" "$F/chat-pck.json"
	[ "$(j .input_tokens)" = 11 ]
	# system "Be brief." 5 + (5 + 3); user "hello" 5 + (5 + 2)
	run -0 --separate-stderr "$CL" --endpoint responses "$F/responses-input.json"
	[ "$(j .input_tokens)" = 25 ]
	# "abcd" 5 + 1, "efghi" 5 + 2
	run -0 --separate-stderr "$CL" --endpoint embeddings "$F/embeddings.json"
	[ "$(j .input_tokens)" = 13 ]
	run -0 --separate-stderr "$CL" --endpoint completions "$F/completions.json"
	[ "$(j .input_tokens)" = 7 ]
}

# --- router-side classification -------------------------------------------------

@test "new session (no hint): state new, X = 0, s = 1.0, decided at elapsed 0" {
	run -0 --separate-stderr "$CL" -c "$F/lb-waw-flag.json" -s "$F/abc-free.json" "$F/chat-pck.json"
	[ -z "$stderr" ]
	[ "$(j .routing.algorithm)" = wait-and-widen ]
	[ "$(j .routing.session_state)" = new ]
	[ "$(j .routing.promoted)" = false ]
	[ "$(j .routing.last_cluster_id)" = null ]
	[ "$(j .routing.x_ms)" = 0 ]
	[ "$(j .routing.scale)" = 1 ]
	[ "$(j .routing.decision.decision)" = select ]
	[ "$(j .routing.decision.session_state)" = new ]
	[ "$(j '.routing.effective_order == .routing.original_order')" = true ]
}

@test "returning session: hint promoted to the front, X and s as configured" {
	run -0 --separate-stderr "$CL" -c "$F/lb-pwaw-flag.json" -s "$F/abcde-free.json" "$F/chat-pck.json"
	orig=$(j '.routing.original_order | join(",")')
	[ "$(j '.routing.original_order | length')" = 5 ]
	hint=$(j '.routing.original_order[3]')
	run -0 --separate-stderr "$CL" -c "$F/lb-pwaw-flag.json" -s "$F/abcde-free.json" \
	    --last-cluster "$hint" "$F/chat-pck.json"
	[ "$(j .routing.session_state)" = returning ]
	[ "$(j .routing.promoted)" = true ]
	[ "$(j .routing.last_cluster_id)" = "$hint" ]
	[ "$(j '.routing.original_order | join(",")')" = "$orig" ]
	[ "$(j '.routing.effective_order[0]')" = "$hint" ]
	[ "$(j '.routing.affinity_group | join(",")')" = "$hint" ]
	# rotation: the others keep their relative order
	IFS=, read -r a b c d e <<<"$orig"
	[ "$(j '.routing.effective_order | join(",")')" = "$d,$a,$b,$c,$e" ]
	[ "$(j .routing.x_ms)" = 300 ]
	[ "$(j .routing.scale)" = 0.1 ]
	[ "$(j .routing.decision.cluster_id)" = "$hint" ]
	[ "$(j .routing.decision.selection)" = primary ]
}

@test "returning session on wait-and-widen k = 1: the group is the hint" {
	run -0 --separate-stderr "$CL" -c "$F/lb-waw-flag.json" -s "$F/abc-free.json" "$F/chat-pck.json"
	first=$(j '.routing.original_order[0]')
	hint=$(printf '%s\n' A B C | grep -vx "$first" | head -n1)
	run -0 --separate-stderr "$CL" -c "$F/lb-waw-flag.json" -s "$F/abc-free.json" \
	    --last-cluster "$hint" "$F/chat-pck.json"
	[ "$(j .routing.session_state)" = returning ]
	[ "$(j .routing.promoted)" = true ]
	[ "$(j '.routing.affinity_group | join(",")')" = "$hint" ]
	[ "$(j '.routing.effective_order[0]')" = "$hint" ]
	# a hint already first is returning but not promoted
	run -0 --separate-stderr "$CL" -c "$F/lb-waw-flag.json" -s "$F/abc-free.json" \
	    --last-cluster "$first" "$F/chat-pck.json"
	[ "$(j .routing.session_state)" = returning ]
	[ "$(j .routing.promoted)" = false ]
}

@test "stale session: a hint naming no candidate routes like new" {
	run -0 --separate-stderr "$CL" -c "$F/lb-waw-flag.json" -s "$F/abc-free.json" \
	    --last-cluster Z "$F/chat-pck.json"
	[ "$(j .routing.session_state)" = stale ]
	[ "$(j .routing.promoted)" = false ]
	[ "$(j .routing.x_ms)" = 0 ]
	[ "$(j .routing.scale)" = 1 ]
	stale=$(j '.routing.decision.cluster_id')
	run -0 --separate-stderr "$CL" -c "$F/lb-waw-flag.json" -s "$F/abc-free.json" "$F/chat-pck.json"
	[ "$(j '.routing.decision.cluster_id')" = "$stale" ]
}

@test "new session with a full rank-1 cluster goes to rank 2 at once (both algorithms)" {
	for lb in lb-waw-flag.json lb-pwaw-flag.json; do
		run -0 --separate-stderr "$CL" -c "$F/$lb" -s "$F/abc-free.json" "$F/chat-pck.json"
		first=$(j '.routing.original_order[0]')
		snap="$BATS_TEST_TMPDIR/snap.json"
		jq --arg f "$first" '.clusters |= map(if .id == $f then .running = 2 else . end)' \
		    "$F/abc-free.json" > "$snap"
		run -0 --separate-stderr "$CL" -c "$F/$lb" -s "$snap" "$F/chat-pck.json"
		[ "$(j .routing.session_state)" = new ]
		[ "$(j .routing.decision.decision)" = select ]
		[ "$(j .routing.decision.cluster_id)" != "$first" ]
		# the flag off waits for rank 1 instead
		[ "$lb" = lb-waw-flag.json ] || continue
		run -0 --separate-stderr "$CL" -c "$F/lb-waw-noflag.json" -s "$snap" "$F/chat-pck.json"
		[ "$(j .routing.decision.decision)" = wait ]
	done
}

@test "flag off: the hint is passed but the session is not classified" {
	run -0 --separate-stderr "$CL" -c "$F/lb-waw-noflag.json" -s "$F/abc-free.json" \
	    --last-cluster B "$F/chat-pck.json"
	[ "$(j .routing.last_cluster_id)" = B ]
	[ "$(j .routing.session_state)" = null ]
	[ "$(j .routing.promoted)" = null ]
	[ "$(j '.routing.decision | has("session_state")')" = false ]
	[ "$(j .routing.x_ms)" = 300 ]
}

@test "the hint comes from x-stargate-last-cluster-id when --last-cluster is absent" {
	run -0 --separate-stderr "$CL" -c "$F/lb-waw-flag.json" -s "$F/abc-free.json" \
	    -H 'x-stargate-last-cluster-id:  Z ' "$F/chat-pck.json"
	[ "$(j .routing.last_cluster_id)" = Z ]
	[ "$(j .routing.session_state)" = stale ]
	# --last-cluster wins over the header
	run -0 --separate-stderr "$CL" -c "$F/lb-waw-flag.json" -s "$F/abc-free.json" \
	    -H 'x-stargate-last-cluster-id: Z' --last-cluster Y "$F/chat-pck.json"
	[ "$(j .routing.last_cluster_id)" = Y ]
}

@test "a blank x-stargate-last-cluster-id is absent: new, exit 0, no error" {
	run -0 --separate-stderr "$CL" -c "$F/lb-waw-flag.json" -s "$F/abc-free.json" \
	    -H 'x-stargate-last-cluster-id:    ' "$F/chat-pck.json"
	[ -z "$stderr" ]
	[ "$(j .routing.last_cluster_id)" = null ]
	[ "$(j .routing.session_state)" = new ]
}

@test "a non-UTF-8 x-stargate-last-cluster-id is absent: new, exit 0, no error" {
	run -0 --separate-stderr "$CL" -c "$F/lb-waw-flag.json" -s "$F/abc-free.json" \
	    -H $'x-stargate-last-cluster-id: \xffB\xfe' "$F/chat-pck.json"
	[ -z "$stderr" ]
	[ "$(j .routing.last_cluster_id)" = null ]
	[ "$(j .routing.session_state)" = new ]
	# the same through --headers-file
	printf 'x-stargate-last-cluster-id: \xff\n' > "$BATS_TEST_TMPDIR/h.txt"
	run -0 --separate-stderr "$CL" -c "$F/lb-waw-flag.json" -s "$F/abc-free.json" \
	    --headers-file "$BATS_TEST_TMPDIR/h.txt" "$F/chat-pck.json"
	[ "$(j .routing.session_state)" = new ]
	# and --last-cluster
	run -0 --separate-stderr "$CL" -c "$F/lb-waw-flag.json" -s "$F/abc-free.json" \
	    --last-cluster $'\xff' "$F/chat-pck.json"
	[ "$(j .routing.session_state)" = new ]
}

@test "a payload session never carries the hint: dropped, classified new" {
	run -0 --separate-stderr "$CL" -c "$F/lb-waw-flag.json" -s "$F/abc-free.json" \
	    --last-cluster B "$F/chat-payload.json"
	[ "$(j .eligible)" = false ]
	[ "$(j .routing.last_cluster_id)" = null ]
	[ "$(j .routing.session_state)" = new ]
	[[ $(j .routing.hint_ignored) == *"not eligible"* ]]
}

@test "x-request-id names the routing request; default sg-classify" {
	run -0 --separate-stderr "$CL" -c "$F/lb-waw-flag.json" -s "$F/abc-free.json" \
	    -H 'X-Request-Id: r-42' "$F/chat-pck.json"
	[ "$(j .routing.decision.request_id)" = r-42 ]
	run -0 --separate-stderr "$CL" -c "$F/lb-waw-flag.json" -s "$F/abc-free.json" "$F/chat-pck.json"
	[ "$(j .routing.decision.request_id)" = sg-classify ]
}

@test "--routing-method to a definition without the flag ignores the hint" {
	run -0 --separate-stderr "$CL" -c "$F/lb-waw-flag-override.json" -s "$F/abc-free.json" \
	    --routing-method pulsar_wait_and_widen --last-cluster Z "$F/chat-pck.json"
	[ "$(j .routing.algorithm)" = pulsar-wait-and-widen ]
	[ "$(j .routing.session_state)" = null ]
	[ "$(j .routing.x_ms)" = 300 ]
	# without the override the model's definition classifies it
	run -0 --separate-stderr "$CL" -c "$F/lb-waw-flag-override.json" -s "$F/abc-free.json" \
	    --last-cluster Z "$F/chat-pck.json"
	[ "$(j .routing.session_state)" = stale ]
}

@test "an unknown --routing-method is refused: exit 65" {
	run -65 --separate-stderr "$CL" -c "$F/lb-waw-flag.json" -s "$F/abc-free.json" \
	    --routing-method no-such-method "$F/chat-pck.json"
	[ -n "$stderr" ]
	[ -z "$output" ]
}

@test "last_cluster_affinity on pulsar: exit 78 naming the field and the algorithm" {
	run -78 --separate-stderr "$CL" -c "$F/lb-lca-on-pulsar.json" -s "$F/abc-free.json" "$F/chat-pck.json"
	[[ $stderr == *last_cluster_affinity* ]]
	[[ $stderr == *pulsar* ]]
}

@test "an lb-config that is not JSON: exit 78" {
	run -78 --separate-stderr "$CL" -c "$F/lb-bad-json.json" -s "$F/abc-free.json" "$F/chat-pck.json"
}

@test "an invalid snapshot: exit 65" {
	run -65 --separate-stderr "$CL" -s "$F/snapshot-bad.json" "$F/chat-pck.json"
	[[ $stderr == *running* ]]
}

# --- input errors ----------------------------------------------------------------

@test "a body that is not JSON, or not an object: exit 65" {
	run -65 --separate-stderr "$CL" "$F/bad-json.json"
	[[ $stderr == sg-classify:\ * ]]
	run -65 --separate-stderr "$CL" "$F/not-object.json"
	[[ $stderr == *"expected a JSON object"* ]]
}

@test "a malformed --headers-file line: exit 65 with file:line" {
	run -65 --separate-stderr "$CL" --headers-file "$F/headers-bad.txt" "$F/chat-pck.json"
	[[ $stderr == *headers-bad.txt:2:* ]]
}

@test "missing files: exit 66" {
	run -66 --separate-stderr "$CL" "$F/no-such-body.json"
	[[ $stderr == *"cannot open"* ]]
	run -66 --separate-stderr "$CL" -s "$F/no-such-snapshot.json" "$F/chat-pck.json"
	run -66 --separate-stderr "$CL" --headers-file "$F/no-such-headers.txt" "$F/chat-pck.json"
}

@test "an empty standard input: exit 66" {
	run -66 --separate-stderr "$CL" </dev/null
	[[ $stderr == *"no request body"* ]]
	run -66 --separate-stderr "$CL" --ndjson </dev/null
}

@test "reading the body from stdin" {
	run -0 --separate-stderr "$CL" - <"$F/chat-pck.json"
	[ "$(j .source)" = prompt_cache_key ]
}

@test "a failed write to stdout: exit 74" {
	run -74 --separate-stderr sh -c '"$@" >/dev/full' sh "$CL" "$F/chat-pck.json"
	[[ $stderr == *"write error"* ]]
}

# --- NDJSON ---------------------------------------------------------------------

@test "--ndjson: one output line per record, each classified" {
	run -0 --separate-stderr "$CL" --ndjson "$F/stream.ndjson"
	[ -z "$stderr" ]
	[ "${#lines[@]}" -eq 4 ]
	[ "$(jq -r .source <<<"${lines[0]}")" = prompt_cache_key ]
	[ "$(jq -r .source <<<"${lines[1]}")" = conversation_id ]
	[ "$(jq -r .endpoint <<<"${lines[1]}")" = responses ]
	[ "$(jq -r .source <<<"${lines[2]}")" = header ]
	[ "$(jq -r .cache_affinity_key <<<"${lines[2]}")" = "mt:v1:session:$(sha hdr-7)" ]
	[ "$(jq -r .source <<<"${lines[3]}")" = payload ]
	[ "$(jq -r .eligible <<<"${lines[3]}")" = false ]
}

@test "--ndjson: bad lines are reported as source:line and skipped, exit 65" {
	run -65 --separate-stderr "$CL" --ndjson "$F/stream-bad.ndjson"
	[ "${#lines[@]}" -eq 2 ]
	[ "$(jq -r .source <<<"${lines[0]}")" = prompt_cache_key ]
	[ "$(jq -r .source <<<"${lines[1]}")" = header ]
	[[ $stderr == *stream-bad.ndjson:2:* ]]
	[[ $stderr == *"stream-bad.ndjson:3: session id from prompt_cache_key is invalid: contains a control character"* ]]
	[[ $stderr == *"stream-bad.ndjson:4: extra: unknown field"* ]]
	[[ $stderr == *"stream-bad.ndjson:6: model prefix is required"* ]]
}

@test "--ndjson: record headers win over -H; record endpoint and hint are used" {
	first=$("$CL" -c "$F/lb-waw-flag.json" -s "$F/abc-free.json" "$F/chat-pck.json" |
	    jq -r '.routing.original_order[0]')
	hint=$(printf '%s\n' A B C | grep -vx "$first" | head -n1)
	in="$BATS_TEST_TMPDIR/in.ndjson"
	{
		printf '{"body": {"model": "tenant-a/llama", "messages": []}, "headers": {"x-multi-turn-session-id": "rec"}}\n'
		printf '{"body": {"model": "tenant-a/llama", "prompt_cache_key": "sess-1"}, "last_cluster_id": "%s"}\n' "$hint"
		printf '{"body": {"model": "tenant-a/llama", "prompt_cache_key": "sess-1"}}\n'
		printf '{"body": {"model": "tenant-a/embed", "input": "abcd"}, "endpoint": "embeddings"}\n'
	} > "$in"
	run -0 --separate-stderr "$CL" --ndjson -c "$F/lb-waw-flag.json" -s "$F/abc-free.json" \
	    -H 'x-multi-turn-session-id: opt' "$in"
	[ "${#lines[@]}" -eq 4 ]
	[ "$(jq -r .session_id <<<"${lines[0]}")" = rec ]
	[ "$(jq -r .routing.session_state <<<"${lines[1]}")" = returning ]
	[ "$(jq -r .routing.promoted <<<"${lines[1]}")" = true ]
	[ "$(jq -r '.routing.effective_order[0]' <<<"${lines[1]}")" = "$hint" ]
	# no promotion carried into the next request of the same session
	[ "$(jq -r .routing.session_state <<<"${lines[2]}")" = new ]
	[ "$(jq -r '.routing.effective_order[0]' <<<"${lines[2]}")" = "$first" ]
	[ "$(jq -r .endpoint <<<"${lines[3]}")" = embeddings ]
	[ "$(jq -r .input_tokens <<<"${lines[3]}")" = 6 ]
}

@test "--ndjson: an unknown endpoint in a record is a bad line" {
	printf '{"body": {"model": "t/m"}, "endpoint": "nope"}\n' > "$BATS_TEST_TMPDIR/e.ndjson"
	run -65 --separate-stderr "$CL" --ndjson "$BATS_TEST_TMPDIR/e.ndjson"
	[[ $stderr == *"e.ndjson:1: endpoint:"* ]]
}

# --- one rule for the hint: the optional-string rule ---------------------------

@test "a hint with a control character is absent: new, as sg-route reads the header" {
	for src in opt hdr; do
		if [ $src = opt ]; then
			set -- --last-cluster $'A\x01'
		else
			set -- -H $'x-stargate-last-cluster-id: A\x01'
		fi
		run -0 --separate-stderr "$CL" -c "$F/lb-waw-flag.json" -s "$F/abc-free.json" \
		    "$@" "$F/chat-pck.json"
		[ -z "$stderr" ]
		[ "$(j .routing.last_cluster_id)" = null ]
		[ "$(j .routing.session_state)" = new ]
	done
	# sg-route, given the same hint as a header, says the same
	run -0 --separate-stderr "$BIN/sg-route" --headers -c "$F/lb-waw-flag.json" \
	    -s "$F/abc-free.json" < <(printf 'x-request-id: r\nx-model: llama\nx-routing-key: tenant-a\nx-input-tokens: 5\nx-cache-affinity-key: k\nx-stargate-last-cluster-id: A\001\n')
	[ "$(j .session_state)" = new ]
	# and --request sends no hint at all
	run -0 --separate-stderr "$CL" --request --last-cluster $'A\x01' "$F/chat-pck.json"
	[ "$(j 'has("last_cluster_id")')" = false ]
}

# --- --request: the routing request sg-route reads ------------------------------

@test "--request prints the routing request the gateway sends (SPEC 2.2 JSON)" {
	run -0 --separate-stderr "$CL" --request -H 'x-request-id: r-7' \
	    --routing-method ' pulsar ' --last-cluster ' B ' --elapsed-ms 25 "$F/chat-pck.json"
	[ -z "$stderr" ]
	[ "${#lines[@]}" -eq 1 ]
	[ "$(j .request_id)" = r-7 ]
	[ "$(j .routing_key)" = tenant-a ]
	[ "$(j .model)" = llama ]
	[ "$(j .cache_affinity_key)" = "mt:v1:session:$(sha sess-1)" ]
	[ "$(j .input_tokens)" = 11 ]
	[ "$(j .routing_method)" = pulsar ]
	[ "$(j .last_cluster_id)" = B ]
	[ "$(j .elapsed_ms)" = 25 ]
	# the default request id
	run -0 --separate-stderr "$CL" --request "$F/chat-pck.json"
	[ "$(j .request_id)" = sg-classify ]
	[ "$(j 'has("last_cluster_id")')" = false ]
}

@test "--request drops the hint of a session not eligible for the store" {
	run -0 --separate-stderr "$CL" --request --last-cluster B "$F/chat-payload.json"
	[ "$(j 'has("last_cluster_id")')" = false ]
	[ "$(j .cache_affinity_key | cut -c1-14)" = "mt:v1:payload:" ]
}

@test "--request | sg-route decides exactly what -s decides" {
	run -0 --separate-stderr "$CL" -c "$F/lb-pwaw-flag.json" -s "$F/abcde-free.json" "$F/chat-pck.json"
	hint=$(j '.routing.original_order[3]')
	for h in "" "$hint" Z; do
		set --
		[ -n "$h" ] && set -- --last-cluster "$h"
		want=$("$CL" -c "$F/lb-pwaw-flag.json" -s "$F/abcde-free.json" "$@" \
		    "$F/chat-pck.json" | jq -c '.routing.decision | del(.elapsed_ms)')
		got=$("$CL" --request "$@" "$F/chat-pck.json" |
		    "$BIN/sg-route" -c "$F/lb-pwaw-flag.json" -s "$F/abcde-free.json" |
		    jq -c 'del(.elapsed_ms)')
		[ "$got" = "$want" ]
	done
	[[ $got == *'"session_state":"stale"'* ]]
}

@test "--request with --ndjson prints one request a line" {
	in="$BATS_TEST_TMPDIR/in.ndjson"
	{
		printf '{"body": {"model": "tenant-a/llama", "prompt_cache_key": "s1"}, "last_cluster_id": "B"}\n'
		printf '{"body": {"model": "tenant-a/llama", "prompt_cache_key": "s2"}, "headers": {"x-request-id": "r-2"}}\n'
	} > "$in"
	run -0 --separate-stderr "$CL" --ndjson --request "$in"
	[ "${#lines[@]}" -eq 2 ]
	[ "$(jq -r .last_cluster_id <<<"${lines[0]}")" = B ]
	[ "$(jq -r .request_id <<<"${lines[1]}")" = r-2 ]
}

@test "--request and -s are exclusive; --ttl needs --store (64)" {
	run -64 --separate-stderr "$CL" --request -s "$F/abc-free.json" "$F/chat-pck.json"
	[[ $stderr == *exclusive* ]]
	run -64 --separate-stderr "$CL" --ttl 1m "$F/chat-pck.json"
	[[ $stderr == *"--ttl needs --store"* ]]
}

# --- --store: the gateway's lookup ------------------------------------------------

# A store holding cluster $2 for the session of fixture $1, written $3 ms ago.
mkstore() {
	local key
	D=$BATS_TEST_TMPDIR/store
	key=$("$CL" "$F/$1" | jq -r .store_key)
	printf '{"key":"%s","cluster_id":"%s","written_ms":%s}\n' "$key" "$2" \
	    $(($(date +%s%3N) - ${3:-0})) | "$BIN/sg-lastcluster" -d "$D" load >/dev/null
}

@test "--store: a hit becomes the hint the router receives" {
	run -0 --separate-stderr "$CL" -c "$F/lb-pwaw-flag.json" -s "$F/abcde-free.json" "$F/chat-pck.json"
	hint=$(j '.routing.original_order[3]')
	mkstore chat-pck.json "$hint"
	run -0 --separate-stderr "$CL" --store "$D" "$F/chat-pck.json"
	[ -z "$stderr" ]
	[ "$(j .store_lookup.result)" = hit ]
	[ "$(j .store_lookup.cluster_id)" = "$hint" ]
	[ "$(j '.store_lookup.age_ms >= 0')" = true ]
	run -0 --separate-stderr "$CL" --store "$D" -c "$F/lb-pwaw-flag.json" \
	    -s "$F/abcde-free.json" "$F/chat-pck.json"
	[ "$(j .routing.last_cluster_id)" = "$hint" ]
	[ "$(j .routing.session_state)" = returning ]
	[ "$(j '.routing.effective_order[0]')" = "$hint" ]
	# --last-cluster still wins over the store
	run -0 --separate-stderr "$CL" --store "$D" --last-cluster Z \
	    -c "$F/lb-pwaw-flag.json" -s "$F/abcde-free.json" "$F/chat-pck.json"
	[ "$(j .routing.last_cluster_id)" = Z ]
}

@test "--store --request | sg-route: the proxy's decision in a pipeline" {
	run -0 --separate-stderr "$CL" -c "$F/lb-pwaw-flag.json" -s "$F/abcde-free.json" "$F/chat-pck.json"
	hint=$(j '.routing.original_order[3]')
	mkstore chat-pck.json "$hint"
	run -0 --separate-stderr bash -c '"$1" --store "$2" --request "$3" |
	    "$4" -c "$5" -s "$6"' _ "$CL" "$D" "$F/chat-pck.json" "$BIN/sg-route" \
	    "$F/lb-pwaw-flag.json" "$F/abcde-free.json"
	[ "$(j .session_state)" = returning ]
	[ "$(j .cluster_id)" = "$hint" ]
}

@test "--store: an entry older than the TTL is a miss; --ttl and the environment set it" {
	mkstore chat-pck.json B 120000
	run -0 --separate-stderr "$CL" --store "$D" "$F/chat-pck.json"	# default 10m
	[ "$(j .store_lookup.result)" = hit ]
	STARGATE_LAST_CLUSTER_TTL=1m run -0 --separate-stderr "$CL" --store "$D" "$F/chat-pck.json"
	[ "$(j .store_lookup.result)" = miss ]
	mkstore chat-pck.json B 120000
	STARGATE_LAST_CLUSTER_TTL=1m run -0 --separate-stderr "$CL" --store "$D" \
	    --ttl 1h "$F/chat-pck.json"
	[ "$(j .store_lookup.result)" = hit ]
	run -0 --separate-stderr "$CL" --store "$D" --ttl 1m --request "$F/chat-pck.json"
	[ "$(j 'has("last_cluster_id")')" = false ]
}

@test "--store: payload sessions are skipped, requests without a session not looked up" {
	mkstore chat-pck.json B
	run -0 --separate-stderr "$CL" --store "$D" "$F/chat-payload.json"
	[ "$(j .store_lookup.result)" = skipped ]
	run -0 --separate-stderr "$CL" --store "$D" --endpoint completions "$F/completions.json"
	[ "$(j .store_lookup)" = null ]
	run -0 --separate-stderr "$CL" --store "$D" "$F/chat-conv-only.json"
	[ "$(j .store_lookup.result)" != hit ]
}

@test "--store: a missing store exits 66, an unreachable Redis 74, bad settings 64" {
	local port
	run -66 --separate-stderr "$CL" --store "$BATS_TEST_TMPDIR/none" "$F/chat-pck.json"
	[ ! -e "$BATS_TEST_TMPDIR/none" ]
	port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')
	run -74 --separate-stderr "$CL" --store "redis://127.0.0.1:$port/0" "$F/chat-pck.json"
	[[ $stderr == "sg-classify: "* ]]
	mkstore chat-pck.json B
	STARGATE_LAST_CLUSTER_LOOKUP_TIMEOUT=soon run -64 --separate-stderr "$CL" \
	    --store "$D" "$F/chat-pck.json"
	[[ $stderr == *STARGATE_LAST_CLUSTER_LOOKUP_TIMEOUT* ]]
	run -64 --separate-stderr "$CL" --store "$D" --ttl 0s "$F/chat-pck.json"
	[[ $stderr == *"--ttl: not a duration > 0"* ]]
}
