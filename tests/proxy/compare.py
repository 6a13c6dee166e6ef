#!/usr/bin/env python3
"""kvproxy against memcached: the same scripted sessions sent to both, the
replies compared byte for byte (CAS values, the version and stats' figures
masked). Starts kvproxy (TCP and a unix socket) in front of the tier
KVPROXY_TARGET names (default local://64: a whole server inside kvproxy;
tests/proxy/peers-rdma.sh sets rdma://...) and `memcached -U 0` on free
ports.

  compare.py KVPROXY [--memcached PATH] [--pending NAME,...] [-v]

A session is a list of chunks sent on one fresh connection, each chunk
after the replies to the one before have arrived (a float: sleep that
long). The replies end at a sentinel (mn, answered MN by both) or when
the server closes. --pending: sessions whose features the library does not
have yet; their differences are reported but do not fail the run.
Exit status: 0 all equal, 1 a difference, 2 could not run (memcached
missing is 77: skipped)."""
import os
import re
import shutil
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from proxytest import free_port, wait_port  # noqa: E402

class Raw(bytes):
    """A chunk sent without the sentinel: the server is to hang up."""


K251 = b"k" * 251
K250 = b"k" * 250
BIG = 2 * 1024 * 1024  # over both servers' item size
MID = 500 * 1024       # under both

# (name, chunks[, pending-feature]) ; chunks: bytes or a sleep in seconds
SESSIONS = [
    ("set-get", [b"set a 5 0 3\r\nabc\r\nget a\r\nget a b a\r\n"]),
    ("gets-cas", [b"set c 0 0 1\r\nx\r\ngets c\r\n", b"cas c 0 0 1 1\r\ny\r\n", b"cas nokey 0 0 1 1\r\ny\r\n"]),
    ("cas-good", [b"set c2 0 0 1\r\nx\r\n"], "casloop"),
    ("add-replace", [b"add ar 0 0 1\r\n1\r\nadd ar 0 0 1\r\n2\r\nreplace ar 0 0 1\r\n3\r\nreplace none 0 0 1\r\n4\r\nget ar none\r\n"]),
    ("noreply", [b"set nr 0 0 1 noreply\r\nx\r\nadd nr 0 0 1 noreply\r\ny\r\ndelete nr noreply\r\nget nr\r\n"]),
    ("delete", [b"set d 0 0 1\r\nx\r\ndelete d\r\ndelete d\r\ndelete d 0\r\ndelete d 0 noreply\r\ndelete d 1\r\ndelete d x y z\r\ndelete\r\n"]),
    ("flags", [b"set f 4294967295 0 1\r\nx\r\nset g 4294967296 0 1\r\ny\r\nset h -1 0 1\r\nz\r\nget f g h\r\n"]),
    ("empty-value", [b"set e 0 0 0\r\n\r\nget e\r\n"]),
    ("binary-value", [b"set bv 0 0 6\r\n\x00\r\n\xff \n\r\nget bv\r\n"]),
    ("pipeline", [b"set p1 0 0 1\r\n1\r\nget p1\r\nset p1 0 0 1\r\n2\r\nget p1\r\ndelete p1\r\nget p1\r\nset p1 0 0 2\r\n33\r\nget p1 p1\r\n"]),
    ("multiget-many", [b"".join(b"set m%d 0 0 %d\r\n%s\r\n" % (i, len(b"%d" % i), b"%d" % i) for i in range(40)) +
                       b"get " + b" ".join(b"m%d" % i for i in range(60)) + b"\r\n"]),
    ("key-250", [b"set " + K250 + b" 0 0 1\r\nx\r\nget " + K250 + b"\r\n"]),
    ("key-251", [b"set " + K251 + b" 0 0 1\r\nx\r\n", b"get " + K251 + b"\r\n", b"get a " + K251 + b"\r\n",
                 b"delete " + K251 + b"\r\ntouch " + K251 + b" 0\r\nincr " + K251 + b" 1\r\n"]),
    ("bad-numbers", [b"set bn x 0 1\r\n", b"set bn 0 x 1\r\n", b"set bn 0 0 x\r\n", b"set bn 0 0 -1\r\n",
                     b"cas bn 0 0 1 x\r\n", b"set bn 0 0 1 2 3\r\n", b"set bn 0 0\r\n", b"incr bn x\r\n",
                     b"incr bn -1\r\n", b"touch bn x\r\n", b"gat x bn\r\n", b"verbosity x\r\n", b"flush_all x\r\n"]),
    ("bad-data-chunk", [b"set bd 0 0 1\r\nxyz\r\nget bd\r\n", b"set bd 0 0 1 noreply\r\nxyz\r\nget bd\r\n"]),
    ("unknown", [b"\r\n", b" \r\n", b"x\r\n", b"bogus command\r\n", b"GET a\r\n", b"gut a\r\n", b"get\r\n",
                 b"sets a 0 0 1\r\n", b"m\r\n", b"mz a\r\n", b"a\x00b\r\n", b"gets\r\n"]),
    ("too-large", [b"set tl 0 0 1\r\nx\r\n", b"set tl 0 0 %d\r\n" % BIG + b"x" * BIG + b"\r\n", b"get tl\r\n",
                   b"set tl2 0 0 %d\r\n" % MID + b"y" * MID + b"\r\nget tl2\r\n"]),
    ("version-verbosity", [b"version\r\nverbosity 1\r\nverbosity 1 noreply\r\nverbosity\r\nverbosity 1 2\r\n"]),
    ("quit", [b"set q 0 0 1\r\nx\r\nget q\r\nquit\r\nget q\r\n"]),
    ("http", [b"GET / HTTP/1.1\r\n"]),
    ("long-line", [Raw(b"x" * 3000)]),
    ("long-get-line", [b"get " + b" ".join(b"g%d" % i for i in range(600)) + b"\r\n"]),
    ("tokens", [b"get " + b" ".join(b"t%d" % i for i in range(30)) + b"\r\n",
                b"set " + b" ".join(b"t%d" % i for i in range(30)) + b"\r\n"]),
    ("expire-neg", [b"set en 0 -1 1\r\nx\r\nget en\r\n", b"set en2 0 0 1\r\nx\r\nreplace en2 0 -1 1\r\ny\r\nget en2\r\n"]),
    ("expire-abs-past", [b"set ep 0 2592001 1\r\nx\r\nget ep\r\n"]),
    ("expire-ttl", [b"set et 0 1 1\r\nx\r\nget et\r\n", 2.2, b"get et\r\n"]),
    ("expire-abs-future", [b"set ef 0 %d 1\r\nx\r\nget ef\r\n" % (int(time.time()) + 100)]),
    ("incr-decr", [b"set n 0 0 2\r\n10\r\nincr n 5\r\ndecr n 100\r\nincr n 18446744073709551615\r\nincr n 2\r\n"
                   b"incr nokey 1\r\ndecr nokey 1\r\nset s 0 0 3\r\nabc\r\nincr s 1\r\nincr n 1 noreply\r\n"
                   b"set n 0 0 1\r\n9\r\nincr n 1\r\nget n\r\nincr n 18446744073709551606\r\nincr n 1 noreply\r\nincr n 0\r\n"
                   b"decr\r\nincr n\r\n"], "incr"),
    ("append-prepend", [b"set ap 3 0 1\r\nb\r\nappend ap 0 0 1\r\nc\r\nprepend ap 0 0 1\r\na\r\nget ap\r\n"
                        b"append none 0 0 1\r\nx\r\nprepend none 0 0 1\r\nx\r\n"], "append"),
    ("touch-gat", [b"set t 0 0 1\r\nx\r\ntouch t 100\r\ntouch none 1\r\ngat 100 t none\r\ngats 0 t\r\ngat 0\r\n"
                   b"touch t 1 noreply\r\ntouch t 0 0 0\r\n"], "touch"),
    ("touch-expire", [b"set te 0 0 1\r\nx\r\ntouch te -1\r\nget te\r\n"], "touch"),
    # flush_all N flushes what was written up to a second before N: 1 is at once
    ("flush-one", [b"set fo 0 0 1\r\nx\r\nflush_all 1\r\nget fo\r\n"], "flush"),
    ("flush", [b"set fl 0 0 1\r\nx\r\nflush_all\r\nget fl\r\nflush_all 0\r\nflush_all noreply\r\nflush_all 0 noreply\r\n"
               b"flush_all 1 2 3\r\nflush_all -1\r\n"], "flush"),
    # meta
    ("mg", [b"set ma 7 0 2\r\nhi\r\n", b"mg ma\r\nmg ma v\r\nmg ma s f v k O123 q\r\nmg ma c\r\nmg none\r\nmg none q\r\n"
            b"mg none k O9 v\r\nmg ma t\r\nmn\r\n"]),
    ("mg-errors", [b"mg\r\n", b"mg " + K251 + b"\r\n", b"mg a v v\r\n", b"mg a !\r\n", b"mg a X\r\n", b"mg a T\r\n",
                   b"mg a Tx\r\n", b"mg a " + b" ".join(b"O%d" % i for i in range(19)) + b"\r\n",
                   b"mg a O" + b"x" * 40 + b"\r\n", b"mg a \xff\r\n", b"mg a E1\r\n"]),
    ("mg-base64", [b"ms YWJj 2 b\r\nhi\r\nmg YWJj b v k\r\nget abc\r\nmg !!!! b\r\nmg YQ b\r\nmd YWJj b k\r\nget abc\r\n"]),
    ("mg-ttl", [b"ms mt 1 T100\r\nx\r\nmg mt t v\r\nms mt2 1\r\nx\r\nmg mt2 t\r\n"]),
    ("mg-touch", [b"ms mgt 1\r\nx\r\nmg mgt T100 t v\r\nmg none T10 v\r\n"], "touch"),
    ("ms", [b"ms s1 2\r\nhi\r\nms s1 2 F5 T0\r\nho\r\nmg s1 v f\r\nms s1 2 q\r\nhu\r\nms s1 2 O1 k\r\nhx\r\nmn\r\n"]),
    ("ms-modes", [b"ms sm 1 ME\r\na\r\nms sm 1 ME\r\nb\r\nms sm 1 MR\r\nc\r\nms none 1 MR\r\nd\r\nms sm 1 MS\r\ne\r\n"
                  b"mg sm v\r\nms sm 1 MZ\r\nf\r\nms sm 1 Mxx\r\ng\r\n"]),
    ("ms-append", [b"ms sa 1\r\nb\r\nms sa 1 MA\r\nc\r\nms sa 1 MP\r\na\r\nmg sa v\r\nms none 1 MA\r\nx\r\n"], "append"),
    ("ms-cas", [b"ms sc 1\r\nx\r\nms sc 1 C1\r\ny\r\nms none 1 C1\r\ny\r\nmg sc v\r\n"]),
    ("ms-errors", [b"ms\r\n", b"ms a\r\n", b"ms a x\r\n", b"ms a -1\r\n", b"ms " + K251 + b" 1\r\nx\r\n",
                   b"ms a 1 !\r\nx\r\n", b"ms a 1 Fx\r\nx\r\n", b"ms a 1 Tx\r\nx\r\n", b"ms a 1 v v\r\nx\r\n",
                   b"ms a 1\r\nxyz\r\n", b"ms a 1 q\r\nxyz\r\n", b"ms a 1 O" + b"x" * 40 + b"\r\nx\r\n",
                   b"ms a %d\r\n" % BIG + b"x" * BIG + b"\r\nmg a\r\n"]),
    ("ms-expired", [b"ms mx 1\r\nx\r\nms mx 1 T-1\r\ny\r\nmg mx v\r\n"]),
    # an append that would outgrow the largest item is not stored; ms c says c0 when nothing was stored
    ("append-outgrown", [b"set atl 0 0 600000\r\n" + b"a" * 600000 + b"\r\nappend atl 0 0 600000\r\n" + b"b" * 600000
                         + b"\r\nms atl 600000 MA\r\n" + b"c" * 600000 + b"\r\nmg atl s\r\n"]),
    ("ms-c-not-stored", [b"ms mcf 1 ME c\r\nx\r\nms mcf 1 ME c\r\ny\r\nms mcb 1 C5 c\r\nz\r\n"]),
    # mg R with T: the token decided against the TTL before the touch, or after it when T comes first
    ("mg-recache-touch", [b"ms mrt 1 T100\r\nx\r\nmg mrt R200 T300 v t\r\nmg mrt v t\r\n"
                          b"ms mrto 1 T100\r\nx\r\nmg mrto T300 R200 v t\r\nms mrtl 1 T100\r\nx\r\nmg mrtl R50 T10 v t\r\n"
                          b"mg mrtl v t\r\n"]),
    # "hit before": touch, gat and a touching mg count as fetches; md I keeps it; a vivifying mg is one
    ("meta-hit-before", [b"set hh3 0 0 1\r\nx\r\ntouch hh3 100\r\nmg hh3 h\r\nset hh4 0 0 1\r\nx\r\ngat 100 hh4\r\n"
                         b"mg hh4 h\r\nset hh5 0 0 1\r\nx\r\nmg hh5 T100\r\nmg hh5 h\r\nmg hh8 N30 h\r\nmg hh8 h\r\n"
                         b"set hha 0 0 1\r\nx\r\nget hha\r\nmd hha I\r\nmg hha h\r\n"]),
    # a counter as memcached's strtoull reads it: white space, a sign, NUL or white space after
    ("incr-strtoull", [b"set im0 0 0 2\r\n-0\r\nincr im0 1\r\nset it 0 0 2\r\n\t5\r\nincr it 1\r\n"
                       b"set iv 0 0 2\r\n5\x0b\r\nincr iv 1\r\nset iz 0 0 3\r\n5\x00x\r\nincr iz 1\r\n"
                       b"set ing 0 0 2\r\n-5\r\nincr ing 1\r\nset inb 0 0 21\r\n-18446744073709551615\r\nincr inb 1\r\n"
                       b"ms mec 0\r\n\r\nma mec C1\r\n"]),
    # ma N q: a success is quiet, except the one that created the item
    ("ma-vivify-quiet", [b"ma mvq2 N30 q J7\r\nma mvq2 N30 q\r\nma mvq3 N30 q v k O1\r\nmg mvq2 v\r\n"]),
    # an exptime that says "expired" stores an item no read sees, at once
    ("expired-at-once", [b"add ane 0 -1 1\r\nx\r\nget ane\r\nadd ane 0 0 1\r\ny\r\nget ane\r\n"
                         b"set gn 0 0 1\r\nx\r\ngat -1 gn\r\nget gn\r\nset gh 0 0 1\r\nx\r\ngats 2592001 gh\r\nget gh\r\n"]),
    ("meta-expired-at-once", [b"ms man2 1 ME T-1\r\nx\r\nmg man2 v\r\nms man2 1 ME\r\ny\r\nmg man2 v\r\n"
                              b"ma mnn N-1 J1 v\r\nmg mnn v\r\nmg mgnn N-1 v\r\nmg mgnn v\r\n"
                              b"ms mdin 1 T100\r\nx\r\nmd mdin I T-1\r\nmg mdin v\r\n"
                              b"set tnm 0 0 1\r\nx\r\nmg tnm T-1 q\r\nmg tnm v\r\n"]),
    ("md", [b"ms d1 1\r\nx\r\nmd d1\r\nmd d1\r\nmd d1 q\r\nms d1 1\r\nx\r\nmd d1 q O5 k\r\nmd none O6 k\r\nmn\r\n",
            b"md\r\n", b"md " + K251 + b"\r\n", b"md a !\r\n", b"md a Cx\r\n"]),
    ("ma", [b"ms n1 2\r\n10\r\nma n1\r\nma n1 v\r\nma n1 D5 v\r\nma n1 MD D100 v\r\nma n1 M- v\r\nma n1 M+ D3 v O7 k\r\n"
            b"ma none\r\nma none O1 k\r\nma none N0 J42 v\r\nma none v\r\nmg none v\r\nma n1 q\r\nma n1 v q\r\nmn\r\n",
            b"ma\r\n", b"ma a Dx\r\n", b"ma a Jx\r\n", b"ma a MX\r\n", b"ms s2 1\r\nx\r\nma s2\r\n",
            b"ma n1 C1 v\r\nma n1 c v\r\nma none C1\r\n"], "incr"),
    # recache tokens: md I marks stale (X), the first mg wins (W), the rest see Z;
    # R wins below a TTL; h says whether the item was read before
    ("md-invalidate", [b"ms iv 2 T100\r\nhi\r\nmg iv v h\r\nmg iv h\r\nmd iv I T30\r\nmg iv v t\r\nmg iv v\r\n"
                       b"mg iv c\r\nms iv 2\r\nho\r\nmg iv v\r\nmd none I\r\nmd iv C1\r\nmd iv q I\r\nmg iv\r\n"]),
    ("mg-recache", [b"ms rc 1 T100\r\nx\r\nmg rc R30 v\r\nmg rc R200 v\r\nmg rc R200 v\r\nmg rc v\r\n"
                    b"ms rn 1\r\ny\r\nmg rn R30 v\r\n"]),
    # vivify on a miss: the first mg N creates an empty item and wins (W), the
    # others see it with Z (mg without N too) until a set rewrites it
    ("mg-vivify", [b"mg vv v N30 t c s f\r\nmg vv v N30 t\r\nmg vv\r\nmg vv k q N30\r\nmg vv R30 v\r\n"
                   b"ms vv 2 T60\r\nhi\r\nmg vv v N30 t\r\nmg vq N30 q k O5\r\nmg vq q k v\r\n"
                   b"mg vt N30 T90 t v\r\nmg vt t v\r\nmg vn N0 v t\r\nmg vn v\r\nmd vn q\r\nmg vn v N30 q\r\n"
                   b"gets vv vq vt\r\nmn\r\n"]),
    # ms I with C: an older unique stores, the item stale (X, then W/Z); the
    # item's own stores plainly; a newer one is EX; no item: NF; I alone: a set
    ("ms-invalidate", [b"ms ia 2\r\nhi\r\nmg ia v\r\nms ia 2 I C1\r\nho\r\nmg ia v\r\nmg ia v\r\n"
                       b"ms ia 2 I C999999999\r\nhx\r\nmg ia v s\r\nms ib 2 I\r\nhi\r\nmg ib v\r\n"
                       b"ms ic 2 I C5\r\nhi\r\nms ia 3 I C1 T50 F7 q\r\nabc\r\nmg ia v f t\r\nmn\r\n"]),
    # ma t: the item's TTL before the call (a vivified item's own)
    ("ma-ttl", [b"set n1 0 100 1\r\n5\r\nma n1 t v\r\nma n1 t\r\nma n2 N50 t v J3\r\nma n2 t c v\r\n"
                b"set n3 0 0 1\r\n1\r\nma n3 t v T30\r\nma n3 t\r\nma none t\r\nma n1 f s k t q\r\nmn\r\n"]),
    # u: no LRU bump -- the item is not marked read (h), not by a touch, a
    # recache win or a vivify either; the next mg without u marks it
    ("mg-no-bump", [b"set nba 0 0 1\r\nx\r\nmg nba u v\r\nmg nba h\r\nmg nba h\r\n"
                    b"set nbb 0 0 1\r\nx\r\nmg nbb T30 u h v\r\nmg nbb h u\r\nmg nbb h\r\nmg nbb h\r\n"
                    b"set nbc 0 100 1\r\nx\r\nmg nbc R200 u v\r\nmg nbc h\r\nmg nbc h\r\n"
                    b"mg nbd N30 u v\r\nmg nbd h\r\nmg nbd h\r\nset nbe 0 0 1\r\nx\r\nmg nbe u v\r\ngat 10 nbe\r\nmg nbe h\r\n"]),
    # flags apply in order: t before T shows the TTL the item had, after it
    # T's; a vivified item has none before N, then N's (T's after a T after N)
    ("meta-ttl-order", [b"set tta 0 100 1\r\nx\r\nmg tta t T30\r\nmg tta t\r\nmg tta T20 t v\r\n"
                        b"set ttc 0 0 1\r\nx\r\nmg ttc t T30 v\r\nmg ttc T0 t\r\nmg ttc t\r\n"
                        b"set ttd 0 100 1\r\n1\r\nma ttd t T30 v\r\nma ttd T40 t v\r\nma ttd T0 t\r\nma ttd t\r\n"
                        b"mg tte N30 t T50\r\nmg tte t\r\nmg ttf T50 N30 t\r\nmg ttf t\r\nmg ttg N30 T50 t\r\n"
                        b"mg ttg t\r\nmg tth t N30 T50\r\nmg tth t\r\nma ttm N30 J5 t T50 v\r\nma ttm t\r\n"
                        b"ma ttn N30 J5 T50 t v\r\nma ttn t\r\nma ttp t N30 J5 v\r\nmn\r\n"]),
    ("mn-me", [b"mn\r\nmn extra\r\n"]),
    ("stats-sub", [b"stats reset\r\nstats nonsense\r\n"]),
]

MASKS = [
    (re.compile(rb"^(VALUE \S+ \d+ \d+) \d+\r$", re.M), rb"\1 CAS\r"),
    (re.compile(rb" c\d+"), rb" cCAS"),
    (re.compile(rb"^VERSION .*\r$", re.M), rb"VERSION x\r"),
]


def mask(b):
    for rx, rep in MASKS:
        b = rx.sub(rep, b)
    return b


def exchange(addr, chunks):
    """Send the chunks in turn; return everything received."""
    fam = socket.AF_UNIX if isinstance(addr, str) else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(addr)
    out = b""
    closed = False
    for ch in chunks:
        if isinstance(ch, float):
            time.sleep(ch)
            continue
        raw = isinstance(ch, Raw)
        try:
            s.sendall(ch + (b"" if raw else b"mn\r\n"))
        except (BrokenPipeError, ConnectionResetError):
            closed = True
            break
        # read until this chunk's sentinel (or the server closes)
        buf = b""
        # memcached writes out at every mn: wait for all of this chunk's
        want = len(re.findall(rb"(?:^|\n)mn[ \r]", ch)) + (0 if raw else 1)
        while raw or not (buf.endswith(b"MN\r\n") and buf.count(b"MN\r\n") >= want):
            try:
                d = s.recv(1 << 20)
            except ConnectionResetError:
                d = b""
            except socket.timeout:
                buf += b"<TIMEOUT>"
                break
            if not d:
                closed = True
                break
            buf += d
        out += buf
        if closed:
            break
    s.close()
    return out + (b"<CLOSED>" if closed else b"")


def main():
    args = sys.argv[1:]
    verbose = "-v" in args
    args = [a for a in args if a != "-v"]
    pending = set()
    mc_bin = shutil.which("memcached") or "/usr/bin/memcached"
    while len(args) > 1 and args[-2] in ("--memcached", "--pending"):
        if args[-2] == "--memcached":
            mc_bin = args[-1]
        else:
            pending = set(filter(None, args[-1].split(",")))
        args = args[:-2]
    if len(args) != 1:
        sys.exit(__doc__)
    kvproxy = args[0]
    if not os.path.exists(mc_bin):
        print("memcached not installed (deploy/setup.sh installs it): skipped")
        sys.exit(77)
    mport, kport = free_port(), free_port()
    sock = f"/tmp/kvproxy-compare-{os.getpid()}.sock"
    user = ["-u", "nobody"] if os.geteuid() == 0 else []
    mc = subprocess.Popen([mc_bin, "-p", str(mport), "-U", "0", "-l", "127.0.0.1", "-t", "2"] + user)
    kv = subprocess.Popen([kvproxy, "-p", str(kport), "-s", sock, "-t", "2",
                           os.environ.get("KVPROXY_TARGET", "local://64")])
    failed = []
    try:
        wait_port(mport, mc, "memcached")
        wait_port(kport, kv, "kvproxy")
        for i, sess in enumerate(SESSIONS):
            name, chunks = sess[0], sess[1]
            feature = sess[2] if len(sess) > 2 else None
            # keys are per session: a prefix keeps sessions apart
            pre = b"S%d" % i
            a = mask(exchange(("127.0.0.1", mport), chunks))
            # every other session goes over the unix socket
            kaddr = sock if i % 2 else ("127.0.0.1", kport)
            b = mask(exchange(kaddr, chunks))
            del pre
            if a == b:
                if verbose:
                    print(f"ok   {name}")
                continue
            tag = "PENDING" if feature in pending else "DIFF"
            print(f"{tag} {name}" + (f" (library lacks {feature})" if tag == "PENDING" else ""))
            print(f"  memcached: {a[:600]!r}")
            print(f"  kvproxy:   {b[:600]!r}")
            if tag == "DIFF":
                failed.append(name)
        # stats: the same names where kvproxy can know them
        st = exchange(("127.0.0.1", kport), [b"stats\r\n"])
        for name in (b"pid", b"uptime", b"curr_connections", b"total_connections", b"cmd_get", b"cmd_set",
                     b"get_hits", b"get_misses", b"threads", b"limit_maxbytes", b"bytes", b"evictions"):
            if not re.search(rb"^STAT " + name + rb" \d+\r$", st, re.M):
                print(f"DIFF stats: no STAT {name.decode()}")
                failed.append("stats")
    finally:
        kv.terminate()
        mc.terminate()
        kv.wait(10)
        mc.wait(10)
    if kv.returncode not in (0, -15):
        print(f"kvproxy exited with status {kv.returncode}")
        failed.append("exit")
    print(f"{len(SESSIONS)} sessions, {len(failed)} differ" + (": " + ", ".join(failed) if failed else ""))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
