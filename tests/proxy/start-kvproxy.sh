# Sourced by the peer-suite runners: start_kvproxy KVPROXY starts it on a free
# port in front of KVPROXY_TARGET (default local://64: a whole server inside
# kvproxy), sets $port and $pid, stops it at exit, and returns once it
# listens (exits 1 saying why when it does not).
start_kvproxy() {
  local target=${KVPROXY_TARGET:-local://64} up=0
  port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  "$1" -p "$port" -t 2 "$target" &
  pid=$!
  trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null' EXIT
  for _ in $(seq 200); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && { up=1; break; }
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  [ $up = 1 ] || { echo "kvproxy $target did not listen on port $port"; exit 1; }
}
