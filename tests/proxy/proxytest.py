"""What compare.py and robust.py share: free ports, starting a server and
waiting for it to listen, reading replies up to a marker."""
import socket
import sys
import time


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def wait_port(port, proc, what):
    """Until proc listens on port; exits the test if it dies or never does."""
    for _ in range(200):
        if proc.poll() is not None:
            sys.exit(f"{what} exited at start (status {proc.returncode})")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    sys.exit(f"{what} does not listen on port {port}")


def recv_until(s, end, count=1):
    """Bytes from s until they end with `end` seen `count` times, or EOF."""
    buf = b""
    while not (buf.endswith(end) and buf.count(end) >= count):
        d = s.recv(1 << 20)
        if not d:
            break
        buf += d
    return buf
