#!/usr/bin/env bash
# How many messages a second one mosquitto takes on this machine, as a fleet's central broker
# does (docs/src/user/fleet.md "How many boards one broker serves"): P publishers, each one
# connection sending N/P messages of an event's size (300 bytes) at QoS 1 from `mosquitto_pub
# -l`, one subscriber at QoS 1 on all of them; the rate is N over the time from the first
# publisher's start to the subscriber's N-th message. Usage: benches/broker_rate.sh [N] [P]
set -euo pipefail
n=${1:-200000}
p=${2:-4}
dir=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$dir"' EXIT
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
{
    echo "listener $port 127.0.0.1"
    echo "allow_anonymous true"
    echo "persistence false"
    echo "max_queued_messages 0"
    [ "$(id -u)" -eq 0 ] && echo "user root"
} >"$dir/m.conf"
PATH="$PATH:/usr/sbin" mosquitto -c "$dir/m.conf" >"$dir/m.log" 2>&1 &
for _ in $(seq 50); do (exec 3<>/dev/tcp/127.0.0.1/"$port") 2>/dev/null && break; sleep 0.1; done
payload=$(printf '{"v":1,"event_id":"b1/cam0/1234/entered_zone:porch/1733500000123","board":"b1","camera":"cam0","event":"entered_zone","track_id":1234,"label":"person","class_id":0,"score":0.87,"zone":"porch","first_seen_ns":1,"last_seen_ns":2,"timestamp_ns":3,"time_ms":1733500000123,"pad":"%0120d"}' 0)
per=$((n / p))
for i in $(seq "$p"); do { yes "$payload" || true; } | head -n "$per" >"$dir/in$i"; done
mosquitto_sub -p "$port" -q 1 -t 'bench/#' -C $((per * p)) >/dev/null &
sub=$!
sleep 0.5
start=$(date +%s.%N)
for i in $(seq "$p"); do mosquitto_pub -p "$port" -q 1 -t "bench/b$i/cam0/events" -l <"$dir/in$i" & done
wait "$sub"
end=$(date +%s.%N)
python3 -c "import sys; n=$((per * p)); s=$end-$start; print(f'{n} messages of {len(sys.argv[1])} bytes, QoS 1, {$p} publishers, 1 subscriber: {s:.2f} s, {n/s:,.0f} messages/s')" "$payload"
