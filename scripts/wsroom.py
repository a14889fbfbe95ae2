"""wsroom.py: bench/'s WebSocket room server (bin/wsroom) for the opt-in
measurement scripts (ws-ab.sh, fleet-tls.sh): start one on a free port of
127.0.0.1, stop it, and record its scripted client's session through
`record proxy`. One source for what those scripts each wrote; not part of
make test. Loopback only."""
import re, socket, subprocess, sys, time


def free_port():
    """A port of 127.0.0.1 free when asked (the caller binds it next)."""
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p


def start(binary, log, tls=None):
    """Starts binary (a wsroom build) on 127.0.0.1:0, its output in the file
    log, over TLS with tls = (cert, key) PEM files; returns the process and
    the address it prints (ws=ADDR). Exits the script if it never does."""
    args = [binary, "--listen", "127.0.0.1:0"]
    if tls:
        args += ["--tls-cert", tls[0], "--tls-key", tls[1]]
    f = open(log, "w+")
    p = subprocess.Popen(args, stdout=f, stderr=f)
    for _ in range(100):
        f.seek(0)
        m = re.search(r"ws=(\S+)", f.read())
        if m:
            return p, m.group(1)
        time.sleep(0.1)
    p.kill(); sys.exit("wsroom did not start: " + open(log).read())


def stop(p):
    p.terminate(); p.wait()


def record(binary, record_bin, out, duration):
    """Records wsroom's scripted client (200 B at 20 Hz for duration) through
    record proxy into out/wsroom.pcap, with a server of its own; returns the
    capture's path."""
    cap = f"{out}/wsroom.pcap"
    srv, addr = start(binary, f"{out}/wsroom-record.log")
    port = free_port()
    rec = subprocess.Popen([record_bin, "proxy", "--listen", f"127.0.0.1:{port}", "--upstream", addr, "--out", cap],
                           stdout=open(f"{out}/record.log", "w"), stderr=subprocess.STDOUT)
    time.sleep(1)
    subprocess.run([binary, "client", "--url", f"ws://127.0.0.1:{port}/ws?room=lobby&user=alice01", "--duration", duration],
                   stdout=subprocess.DEVNULL, check=True)
    rec.send_signal(2); rec.wait(); stop(srv)
    return cap
