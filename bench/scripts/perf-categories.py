#!/usr/bin/env python3
"""Sorts the samples of a `perf record -g` profile of a Go server into a few
categories (syscall kinds, scheduler, GC, locks, copying, own code) by the
frames on each sample's stack. Usage: perf-categories.py perf.data"""
import subprocess, sys, collections

KERNEL = [  # by what the stack went through, first match wins
    ("syscall: writev/write (TCP send, incl. loopback delivery to the peer)", ["do_writev", "vfs_writev", "ksys_write", "__x64_sys_write"]),
    ("syscall: read (TCP receive)", ["ksys_read", "__x64_sys_read"]),
    ("syscall: epoll (netpoller)", ["ep_poll", "do_epoll_wait", "__x64_sys_epoll"]),
    ("syscall: futex (thread sleep/wake)", ["futex"]),
    ("syscall: nanosleep (runtime usleep while spinning)", ["nanosleep"]),
    ("syscall: other", ["entry_SYSCALL_64"]),
    ("kernel: scheduler/interrupts outside syscalls", [""]),
]
GC = ["runtime.gcBgMarkWorker", "runtime.gcDrain", "runtime.bgsweep", "runtime.bgscavenge", "runtime.gcAssist", "runtime.mallocgc"]
USER = [  # by the leaf function, first match wins
    ("locks and sync.Pool (sync.Mutex/RWMutex, runtime locks, deferred unlocks)", ["sync.(*Mutex)", "sync.(*RWMutex)", "sync.(*poolDequeue)", "sync.(*poolChain)", "runtime.lock2", "runtime.unlock2", "deferwrap", "sync.(*Pool)"]),
    ("copying (memmove)", ["runtime.memmove", "runtime.memclr"]),
    ("deadline timers", ["Deadline", "runtime.modtimer", "runtime.addtimer", "runtime.(*timer)", "runtime.(*timers)"]),
    ("Go scheduler, channels, netpoll", ["runtime.schedule", "runtime.findRunnable", "runtime.park", "runtime.gopark", "runtime.goready", "runtime.ready", "runtime.mcall", "runtime.netpoll", "runtime.chan", "runtime.select", "runtime.casgstatus", "runtime.execute", "runtime.runqget", "runtime.runqput", "runtime.stealWork", "runtime.wakep", "runtime.notewakeup", "runtime.futex", "runtime.exitsyscall", "runtime.entersyscall", "runtime.reentersyscall", "runtime.usleep", "internal/poll", "runtime.poll"]),
    ("wire codec", ["internal/wire."]),
    ("relay/room code", ["internal/relay.", "internal/room."]),
    ("nats-server code", ["nats-server"]),
    ("metrics", ["prometheus"]),
    ("other Go runtime", ["runtime."]),
    ("other", [""]),
]

def classify(frames):
    stack = " | ".join(frames)
    if frames[0].startswith("[k]"):
        rules = KERNEL
    elif any(g in stack for g in GC):
        return "Go GC and allocation"
    else:
        rules = USER
        stack = frames[0]
    for cat, keys in rules:
        if any(k in stack for k in keys):
            return cat
    return "other"

def main(path):
    out = subprocess.run(["perf", "script", "-i", path, "-F", "ip,sym,dso"], capture_output=True, text=True, check=True).stdout
    counts = collections.Counter()
    total = 0
    for block in out.strip().split("\n\n"):
        frames = []
        for line in block.splitlines():
            parts = line.strip().split(None, 1)
            if len(parts) == 2:
                frames.append(("[k] " if "kernel.kallsyms" in parts[1] else "") + parts[1])
        if frames:
            total += 1
            counts[classify(frames)] += 1
    print(f"{total} samples")
    for cat, n in counts.most_common():
        print(f"{100*n/total:5.1f}%  {cat}")

if __name__ == "__main__":
    main(sys.argv[1])
