#!/usr/bin/env python3
"""Where a process's CPU goes, by subsystem: reads `perf script -F ip,sym,dso`
(a recording with call graphs) on stdin and files every sample under the first
subsystem, in the order below, that a frame of its stack belongs to; prints
each subsystem's share of the samples, then the leaf symbols of what matched
none.

The order matters: a sample in the kernel's copy of a FUSE reply is FUSE, not
memory copying, and libcurl's own code is what is left of the network loop
once the socket calls, the body copy and perch's completion are taken out.
Used by bench/cost.sh (issue 14: "top symbols by subsystem").
"""
import collections
import re
import sys

# (subsystem, part, pattern over one frame "symbol (dso)")
PARTS = [
    ("FUSE", "reply: writev/splice to /dev/fuse", r"fuse_dev_do_write|fuse_dev_splice_write"),
    ("FUSE", "request: read from /dev/fuse", r"fuse_dev_do_read"),
    ("block writes", "pack/object file write (pwritev)",
     r"do_pwritev|ext4_buffered_write_iter|shmem_file_write_iter|generic_perform_write"),
    ("block writes", "CRC32C", r"crc32"),
    ("HTTP", "recv", r"tcp_recvmsg"),
    ("HTTP", "send (with the loopback delivery)", r"__sys_sendto|tcp_sendmsg"),
    ("allocation", "page faults", r"asm_exc_page_fault"),
    ("event loop", "epoll, poll, timerfd", r"__x64_sys_epoll|__x64_sys_poll|__x64_sys_timerfd|do_epoll"),
    ("locking", "futex", r"__x64_sys_futex"),
    ("other system calls", "", r"entry_SYSCALL_64"),
    ("scheduling", "switches outside system calls", r"finish_task_switch|__schedule"),
    ("interrupts", "", r"asm_common_interrupt|asm_sysvec|handle_softirqs"),
    ("index", "RocksDB", r"rocksdb::"),
    ("allocation", "malloc/free", r"^tc_|tcmalloc::|operator new|operator delete|\bmalloc\b|\bfree\b|_int_malloc|_int_free"),
    ("logging", "spdlog", r"spdlog::"),
    ("locking", "mutexes", r"pthread_mutex|__lll_lock"),
    ("directory listings", "PROPFIND XML", r"xml|ParseMultistatus"),
    ("HTTP", "body copy out of libcurl", r"basic_string.*_S_copy|_S_copy"),
    ("HTTP", "perch's completion of a transfer", r"DrainCompleted|PerchCurl|CurlCallbacks"),
    ("HTTP", "libcurl", r"libcurl|curl_multi|Curl_"),
]
COMPILED = [(s, p, re.compile(pat)) for s, p, pat in PARTS]
SYSCALL = re.compile(r"__(?:x64|do)_sys_(\w+)")


def syscall_of(stack):
    """The system call a kernel stack is in, as far as its frames tell."""
    for frame in reversed(stack):  # outermost first
        m = SYSCALL.search(frame)
        if m:
            return m.group(1)
    if any("finish_task_switch" in f for f in stack):
        return "(not named: switching threads)"
    return "(not named)"



def main():
    parts = collections.Counter()
    leaves = collections.Counter()
    total = 0
    stack = []

    def flush():
        nonlocal total
        if not stack:
            return
        total += 1
        for subsystem, part, pat in COMPILED:
            if any(pat.search(f) for f in stack):
                if subsystem == "other system calls":
                    part = syscall_of(stack)
                parts[(subsystem, part)] += 1
                return
        parts[("perch and libraries, other", "")] += 1
        leaves[stack[0]] += 1

    for line in sys.stdin:
        line = line.rstrip("\n")
        if not line.strip():
            flush()
            stack = []
        elif line[0] in " \t":
            fields = line.split(None, 1)
            if len(fields) == 2:
                stack.append(fields[1])
        else:
            stack = []
    flush()
    if total == 0:
        print("no samples")
        return
    by_subsystem = collections.Counter()
    for (subsystem, _), n in parts.items():
        by_subsystem[subsystem] += n
    print(f"{total} samples; share of perchd's CPU by subsystem (each sample counted once):")
    for subsystem, n in by_subsystem.most_common():
        print(f"  {100 * n / total:5.1f}%  {subsystem}")
        for (s, part), m in parts.most_common():
            if s == subsystem and part:
                print(f"          {100 * m / total:5.1f}%  {part}")
    print("Leaf symbols of the rest (top 10):")
    for sym, n in leaves.most_common(10):
        print(f"  {100 * n / total:5.1f}%  {sym[:100]}")


if __name__ == "__main__":
    main()
