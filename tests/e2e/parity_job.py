"""A job of the parity test: ``work`` seconds of work, resumable, no imports.

It keeps its progress in the checkpoint folder and leaves on SIGTERM with the
exit code of a checkpointed stop (75), so a preempted job resumes where it
was, as the simulator assumes. Given more GPUs than it asked for (an elastic
grant), it goes faster as the simulator's model says (each extra gang adds
``efficiency`` of its speed). Time paused (SIGSTOP) is not counted as work.
"""

import os
import signal
import sys
import time

work, asked, efficiency = float(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
granted = int(os.environ.get("CORRAL_NUM_GPUS", asked))
rate = 1.0 + efficiency * (granted / asked - 1.0)
folder = os.environ.get("CORRAL_CHECKPOINT_DIR", ".")
os.makedirs(folder, exist_ok=True)
path = os.path.join(folder, "progress")
try:
    with open(path) as f:
        done = float(f.read())
except (OSError, ValueError):
    done = 0.0


def leave(_signum, _frame):
    with open(path + ".tmp", "w") as f:
        f.write(repr(done))
    os.replace(path + ".tmp", path)
    os._exit(75)


signal.signal(signal.SIGTERM, leave)
last = time.monotonic()
while done < work:
    time.sleep(min(0.01, (work - done) / rate))
    now = time.monotonic()
    done += min(now - last, 0.05) * rate  # a long gap was a pause, not work
    last = now
