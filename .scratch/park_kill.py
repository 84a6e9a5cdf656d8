import sys, time, json, tempfile
from pathlib import Path
sys.path.insert(0, ".")
from tests.e2e.test_parked_preemption import service, task, PARKED
from corral.runtime.service_process import wait_for
from tests.runtime.harness import TERMINAL
tmp = Path(tempfile.mkdtemp())
svc = service(tmp)
try:
    svc.start(); c = svc.client
    a = c.submit({"name": "a", "task": task(1), "gpus": 1})
    wait_for(lambda: c.job(a["id"])["steps"] > 5, 60)
    b = c.submit({"name": "b", "task": task(2), "gpus": 1})
    wait_for(lambda: c.job(a["id"])["reason"] == PARKED, 30)
    svc.kill9(); svc.start()
    try:
        for j in (a, b):
            wait_for(lambda j=j: c.job(j["id"])["status"] in TERMINAL, 60)
    except TimeoutError:
        print("TIMEOUT")
    t0 = None
    for j in (a, b):
        d = c.job(j["id"])
        print(j["id"], d["status"], d["reason"])
        for e in d["events"]:
            t0 = t0 or e["time"]
            print(j["id"], round(e["time"]-t0, 2), e["kind"], json.dumps(e["detail"]))
        print([ (x["cause"], x["detail"]) for x in d["attempts"]])
    import subprocess
    print(subprocess.run("ps -eo pid,pgid,stat,etime,cmd | grep -v grep | grep -E 'corral|launcher|run_task'", shell=True, capture_output=True, text=True).stdout)
finally:
    svc.close()
