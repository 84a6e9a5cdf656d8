import sys, time, hashlib
import numpy as np
from corral.model.cluster_specs import load_cluster
from corral.sim.run import RunSpec, simulate
from corral.traces import TraceOptions, load_trace
prof = "--prof" in sys.argv
names = [a for a in sys.argv[1:] if not a.startswith("--")]
for policy in names:
    machines = load_cluster("philly", scale=0.17)
    typed = policy in ("gandiva", "antman")
    jobs = load_trace("philly", machines.total_gpus, TraceOptions(job_types="gavel" if typed else None))
    spec = RunSpec(policy, switch_cost="gandiva" if policy == "gandiva" else None)
    if prof:
        import cProfile, pstats
        pr = cProfile.Profile(); pr.enable()
    r = simulate(jobs, machines, spec)
    if prof:
        pr.disable(); pstats.Stats(pr).sort_stats("tottime").print_stats(25)
    st = r.state
    h = hashlib.sha256()
    for a in (st.first_start, st.finish_time, st.preemptions):
        h.update(np.ascontiguousarray(a).tobytes())
    print(policy, f"{r.wall_s:.2f}s", h.hexdigest()[:12], int(st.preemptions.sum()), flush=True)
