#!/usr/bin/env python3
"""Kills one worker at a random moment of a data-parallel run and records what the run did.

A TF_CONFIG cluster of real `tf-iaware worker` processes on 127.0.0.1 (1 ps, 3 workers, each with
its metrics agent) is started for every trial; `tf-iaware run --model mlp --checkpoint-every 1`
trains on it; once training has begun (the plan is logged), one worker chosen at random is killed
with SIGKILL after a random delay (uniform within `--kill-window` seconds). With checkpoints every
step, a good share of the kills land inside a checkpoint fetch or a recovery's own runs.

Usage: kill_workers.py [--exe target/debug/tf-iaware] [--trials 20] [--steps 300] [--seed 1]
                       [--kill-window 0.2 8] [--out results.jsonl]

Trials go on until `--trials` of them had a worker killed. Each trial appends one JSON line: the kill (worker, delay), the run's rc and wall time, and, when
it finished, its recoveries (kind, lost, step, restored_from, redone_steps, detect_ms, recover_ms)
and steps_run against the global steps.
"""
import argparse
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_cluster(exe, folder, workers):
    jobs = {"ps": 1, "worker": workers}
    cluster = {j: [f"127.0.0.1:{free_port()}" for _ in range(n)] for j, n in jobs.items()}
    metrics = {j: [f"127.0.0.1:{free_port()}" for _ in range(n)] for j, n in jobs.items()}
    path = os.path.join(folder, "tf.json")
    with open(path, "w") as f:
        json.dump({"cluster": cluster, "metrics": metrics, "rpc_layer": "grpc"}, f)
    procs = {}
    for job, n in jobs.items():
        for i in range(n):
            log = open(os.path.join(folder, f"{job}{i}.log"), "w")
            procs[(job, i)] = subprocess.Popen(
                [exe, "worker", "--tf-config", path, "--job", job, "--task", str(i)],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    # Ready when every gRPC port accepts.
    deadline = time.time() + 60
    for job, addrs in cluster.items():
        for a in addrs:
            host, port = a.rsplit(":", 1)
            while True:
                try:
                    socket.create_connection((host, int(port)), timeout=0.5).close()
                    break
                except OSError:
                    if time.time() > deadline:
                        raise SystemExit(f"task at {a} never served")
                    time.sleep(0.2)
    return path, procs


def stop_cluster(procs):
    for p in procs.values():
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs.values():
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def trial(args, rng, n):
    with tempfile.TemporaryDirectory(prefix="kill-workers-") as folder:
        tf_json, procs = start_cluster(args.exe, folder, args.workers)
        victim = rng.randrange(args.workers)
        delay = rng.uniform(*args.kill_window)
        cmd = [args.exe, "run", "--model", "mlp", "--cluster", f"tf-config:{tf_json}",
               "--strategy", "replica-setter", "--batch", "32", "--steps", str(args.steps),
               "--warmup", "0", "--checkpoint-every", "1", "--max-recoveries", "3", "--json"]
        env = dict(os.environ, RUST_LOG="info")
        started = time.time()
        run = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=env)
        killed = {}
        stderr_lines = []

        def watch():
            for line in run.stderr:
                stderr_lines.append(line)
                # The plan is logged just before training starts.
                if "samples on" in line and not killed:
                    killed["planned_at"] = time.time() - started
                    t = threading.Timer(delay, lambda: kill())
                    t.daemon = True
                    t.start()

        def kill():
            if run.poll() is None:
                procs[("worker", victim)].send_signal(signal.SIGKILL)
                killed["at"] = time.time() - started

        w = threading.Thread(target=watch, daemon=True)
        w.start()
        # stdout is read here, stderr only by `watch`.
        guard = threading.Timer(args.run_timeout, run.kill)
        guard.daemon = True
        guard.start()
        out = run.stdout.read()
        run.wait()
        guard.cancel()
        w.join(timeout=5)
        if args.logs:
            with open(os.path.join(args.logs, f"trial{n}.stderr"), "w") as f:
                f.writelines(stderr_lines)
        wall = time.time() - started
        stop_cluster(procs)
        record = {"trial": n, "victim": f"worker:{victim}", "delay_s": round(delay, 3),
                  "killed_at_s": round(killed.get("at", -1), 3), "rc": run.returncode,
                  "wall_s": round(wall, 1)}
        try:
            report = json.loads(out)
            record["global_steps"] = len(report["losses"])
            record["steps_run"] = report["steps_run"]
            record["recoveries"] = [
                {k: r[k] for k in ("step", "kind", "lost", "restored_from", "redone_steps",
                                   "detect_ms", "recover_ms", "error")}
                for r in report["recoveries"]]
        except (ValueError, KeyError):
            record["stderr_tail"] = "".join(stderr_lines[-6:])
        return record


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--exe", default="target/debug/tf-iaware")
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--kill-window", type=float, nargs=2, default=[0.2, 8.0])
    ap.add_argument("--run-timeout", type=float, default=400)
    ap.add_argument("--out", default="-")
    ap.add_argument("--logs", help="folder for each trial's stderr")
    args = ap.parse_args()
    args.exe = os.path.abspath(args.exe)
    rng = random.Random(args.seed)
    out = sys.stdout if args.out == "-" else open(args.out, "a")
    kills, n = 0, 0
    # Until `--trials` trials had their worker killed (a run that ends before the kill, or
    # fails before training, is recorded too but not counted).
    while kills < args.trials:
        record = trial(args, rng, n)
        n += 1
        kills += record["killed_at_s"] >= 0
        print(json.dumps(record), file=out, flush=True)
        if out is not sys.stdout:
            print(json.dumps({k: v for k, v in record.items() if k != "recoveries"}),
                  flush=True)


if __name__ == "__main__":
    main()
