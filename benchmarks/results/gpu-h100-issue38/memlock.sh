#!/bin/bash
# Does RLIMIT_MEMLOCK bound torch_memory_saver's pinned CPU backup? Run as an unprivileged user (no CAP_IPC_LOCK).
set -u
cd "$(dirname "$0")"
cat > /tmp/mlock.py <<'PY'
import ctypes, resource
print("memlock limit (soft, hard):", resource.getrlimit(resource.RLIMIT_MEMLOCK))
libc = ctypes.CDLL("libc.so.6", use_errno=True)
buf = ctypes.create_string_buffer(16 << 20)
r = libc.mlock(buf, 16 << 20)
print("plain mlock of 16 MiB:", "ok" if r == 0 else f"refused errno {ctypes.get_errno()}")
PY
cat > /tmp/pin.py <<'PY'
import resource, torch
print("memlock limit:", resource.getrlimit(resource.RLIMIT_MEMLOCK))
t = torch.empty(4 * 2**30, dtype=torch.uint8, pin_memory=True); t.fill_(1)
print("torch pin_memory 4 GiB (cudaHostAlloc):", t.is_pinned(), int(t[::2**20].sum()))
PY
RUN="setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all --bounding-set=-all"
echo "== as root, no limit"; python3 /tmp/mlock.py
echo "== unprivileged, memlock 64 KiB"
$RUN prlimit --memlock=65536:65536 env PYTHONPATH=$PYTHONPATH HOME=/tmp python3 /tmp/mlock.py
$RUN prlimit --memlock=65536:65536 env PYTHONPATH=$PYTHONPATH HOME=/tmp python3 /tmp/pin.py
echo "== torch_memory_saver CPU backup (4 GiB weights) released and resumed, unprivileged, memlock 64 KiB"
cat > /tmp/saver.py <<'PY'
import subprocess, sys, os
from torch_memory_saver import configure_subprocess
with configure_subprocess():
    p = subprocess.Popen([sys.executable, sys.argv[1], "--filler-gib", "4", "--kv-gib", "1"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
print(p.stdout.readline().strip())
for c in ("fingerprint", "release", "resume", "release", "resume", "exit"):
    p.stdin.write(c + "\n"); p.stdin.flush()
    if c != "exit": print(c, "->", p.stdout.readline().strip()[:80])
p.wait(); print("exit status", p.returncode)
PY
$RUN prlimit --memlock=65536:65536 env PYTHONPATH=$PYTHONPATH HOME=/tmp python3 /tmp/saver.py "$PWD/saver_engine.py"
