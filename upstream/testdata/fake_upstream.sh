#!/usr/bin/env bash
# fake_upstream.sh is a hand-written stdio MCP upstream for client_test.go, for behaviour a
# well-mannered go-sdk server cannot show. It appends every line it reads to $FAKE_LOG, answers
# initialize, tools/list and ping, and misbehaves as $FAKE_MODE asks:
#
#	hang      declares tools, lists tool "slow" and never answers tools/call
#	stubborn  ignores SIGTERM, starts a grandchild (sleep), writes "PID GRANDCHILD_PID" to
#	          $FAKE_PIDS, and keeps running after its stdin closes
#	noisy     declares tools; writes $FAKE_GARBAGE (default 1) non-JSON lines and a line of
#	          $FAKE_BIG bytes to stdout before anything valid
#	reverse   declares nothing; after notifications/initialized it sends the gateway
#	          sampling/createMessage (id "s1") and ping (id "p1")
#	chatty    declares nothing; writes a stderr line of $FAKE_BIG bytes and then $FAKE_BIG
#	          more bytes of short stderr lines before it reads anything
#	mute      writes a line to stderr, then answers nothing (not even initialize), and exits
#	          with status 0 when its stdin closes
#	picky     declares tools; exits with status 3 when it reads a request it does not know
#	          (as some legacy servers do with server/discover)
#	late      declares tools; answers server/discover (with 2026-07-28) only once initialize
#	          arrives, just before it answers initialize: a dual-era server slow to start
#
# It parses only what the gateway's compact encoder writes: "id" right after "jsonrpc", and
# "method" before "params".
set -u
mode=${FAKE_MODE:?set FAKE_MODE}
log=${FAKE_LOG:-/dev/null}

send() { printf '%s\n' "$1"; }

caps='{}'
case $mode in
hang) caps='{"tools":{}}' ;;
picky) caps='{"tools":{}}' ;;
late) caps='{"tools":{"listChanged":false}}' ;;
stubborn)
	trap '' TERM
	sleep 1000 &
	printf '%s %s\n' "$$" "$!" >"${FAKE_PIDS:?set FAKE_PIDS}"
	;;
noisy)
	caps='{"tools":{}}'
	for ((i = 0; i < ${FAKE_GARBAGE:-1}; i++)); do send 'this is not JSON at all'; done
	big=$(head -c "${FAKE_BIG:?set FAKE_BIG}" /dev/zero | tr '\0' x)
	send "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"level\":\"info\",\"data\":\"$big\"}}"
	;;
reverse) ;;
mute) echo 'fetching the server, please wait' >&2 ;;
chatty)
	head -c "${FAKE_BIG:?set FAKE_BIG}" /dev/zero | tr '\0' x >&2
	echo >&2
	yes 'short line' | head -c "$FAKE_BIG" >&2
	;;
*)
	echo "fake_upstream: unknown mode $mode" >&2
	exit 2
	;;
esac

re_id='^\{"jsonrpc":"2.0","id":([0-9]+)'
re_method='"method":"([^"]*)"'
while IFS= read -r line; do
	printf '%s\n' "$line" >>"$log"
	[[ $mode == mute ]] && continue
	id=
	method=
	[[ $line =~ $re_id ]] && id=${BASH_REMATCH[1]}
	[[ $line =~ $re_method ]] && method=${BASH_REMATCH[1]}
	if [[ $mode == picky && -n $id && -n $method ]]; then
		case $method in
		initialize | tools/list | tools/call | ping) ;;
		*)
			echo "fake_upstream: unknown method $method" >&2
			exit 3
			;;
		esac
	fi
	case $method in
	server/discover)
		[[ $mode == late ]] && discover_id=$id
		;;
	initialize)
		if [[ $mode == late && -n ${discover_id:-} ]]; then
			send "{\"jsonrpc\":\"2.0\",\"id\":$discover_id,\"result\":{\"resultType\":\"complete\",\"supportedVersions\":[\"2026-07-28\",\"2025-11-25\"],\"capabilities\":$caps,\"ttlMs\":0,\"cacheScope\":\"public\",\"_meta\":{\"io.modelcontextprotocol/serverInfo\":{\"name\":\"fake-late\",\"version\":\"1.0.0\"}}}}"
		fi
		send "{\"jsonrpc\":\"2.0\",\"id\":$id,\"result\":{\"protocolVersion\":\"2025-11-25\",\"capabilities\":$caps,\"serverInfo\":{\"name\":\"fake-$mode\",\"version\":\"1.0.0\"}}}"
		;;
	notifications/initialized)
		if [[ $mode == reverse ]]; then
			send '{"jsonrpc":"2.0","id":"s1","method":"sampling/createMessage","params":{"messages":[],"maxTokens":1}}'
			send '{"jsonrpc":"2.0","id":"p1","method":"ping"}'
		fi
		;;
	tools/list)
		send "{\"jsonrpc\":\"2.0\",\"id\":$id,\"result\":{\"tools\":[{\"name\":\"slow\",\"inputSchema\":{\"type\":\"object\"}}]}}"
		;;
	ping)
		send "{\"jsonrpc\":\"2.0\",\"id\":$id,\"result\":{}}"
		;;
	esac
	# tools/call, notifications and responses get no answer.
done

if [[ $mode == stubborn ]]; then
	# Outlive stdin; SIGTERM is ignored, so only SIGKILL ends this.
	wait
fi
