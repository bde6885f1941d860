#!/usr/bin/env python3
"""CPU time of an emulated cluster's tasks, to compare what a training step costs each task.

A cluster started by `tf-iaware emulate` or `tf-iaware bench` (the *owner* process) runs each
task as a child process `tf-iaware worker --job J --task K`. Each worker is in the cgroup
`/sys/fs/cgroup/cpu/tf-iaware-<owner>-<serial>-worker<K>/tf` (tf-iaware-emulate/src/cgroup.rs),
whose `cpu.stat` counts CFS throttling. On the developer machine (cgroup v1) `cpuacct` is not
mounted with `cpu`, so a task's CPU time is its process's utime + stime from /proc/PID/stat,
which the kernel scales to the task's precise runtime (all threads, exited ones included).

Used two ways:

- `crosscheck.py --cpu` calls `snapshot()` around its timed window (TF2 `ps` mode) and puts
  `delta()` per step into its RESULT;
- around a `tf-iaware bench` run, which starts its own cluster, as a sampler:

      cpustat.py sample --owner BENCH_PID --out S.jsonl     # until the owner exits
      cpustat.py rust --samples S.jsonl --bench R.json      # per-step CPU of that run

  `rust` finds the training window in the samples (it ends where the workers' summed CPU rate
  falls, at the bench's held-out evaluation, and lasts the report's training seconds; use one
  evaluation, at the end: `--eval-every` = `--max-train-s`) and divides each task's CPU in it by
  the steps the bench report gives for that worker.
"""

import argparse
import glob
import json
import os
import sys
import time

CGROUP_CPU = "/sys/fs/cgroup/cpu"
TICK = os.sysconf("SC_CLK_TCK")


def _read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def process_cpu_s(pid):
    """utime + stime of process `pid`, seconds (None if it is gone)."""
    stat = _read("/proc/%d/stat" % pid)
    if stat is None:
        return None
    fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) "
    return (int(fields[11]) + int(fields[12])) / TICK  # fields 14 and 15 of proc(5)


def _children(owner):
    """{pid: argv} of the owner's child processes."""
    out = {}
    for d in glob.glob("/proc/[0-9]*"):
        stat = _read(d + "/stat")
        if stat is None or int(stat[stat.rindex(")") + 2:].split()[1]) != owner:
            continue
        argv = (_read(d + "/cmdline") or "").split("\0")
        out[int(d[6:])] = argv
    return out


def _task_name(argv):
    if len(argv) < 2 or argv[1] != "worker" or "--job" not in argv or "--task" not in argv:
        return None
    return "%s%s" % (argv[argv.index("--job") + 1], argv[argv.index("--task") + 1])


def _cgroups(owner):
    """{pid in the group's tf child: cpu.stat and quota} of the owner's worker cgroups."""
    out = {}
    for d in glob.glob("%s/tf-iaware-%d-*-worker*/tf" % (CGROUP_CPU, owner)):
        stat = dict(l.split() for l in (_read(d + "/cpu.stat") or "").splitlines() if l.strip())
        quota, period = _read(d + "/cpu.cfs_quota_us"), _read(d + "/cpu.cfs_period_us")
        entry = {
            "cgroup": d,
            "nr_periods": int(stat.get("nr_periods", 0)),
            "nr_throttled": int(stat.get("nr_throttled", 0)),
            "throttled_s": int(stat.get("throttled_time", 0)) / 1e9,
            "quota_cores": int(quota) / int(period) if quota and period and int(quota) > 0 else None,
        }
        for pid in (_read(d + "/cgroup.procs") or "").split():
            out[int(pid)] = entry
    return out


def snapshot(owner, client=None):
    """CPU seconds (and the worker cgroups' throttling) of every task of `owner`'s cluster, and
    of `client` (a pid; default this process) — `{"t", "tasks": {name: {...}}, "client_cpu_s"}`."""
    groups = _cgroups(owner)
    tasks = {}
    for pid, argv in _children(owner).items():
        name = _task_name(argv)
        cpu = process_cpu_s(pid)
        if name is None or cpu is None:
            continue
        entry = {"pid": pid, "cpu_s": cpu}
        entry.update(groups.get(pid, {}))
        tasks[name] = entry
    times = os.times()
    own = times.user + times.system
    return {
        "t": time.monotonic(),
        "tasks": tasks,
        "client_cpu_s": own if client is None else process_cpu_s(client),
    }


def delta(a, b, steps_per_worker):
    """Per task between snapshots `a` and `b`: CPU seconds, CPU ms per step (workers: its own
    steps; ps: all steps), share of its quota used, throttled periods and seconds."""
    seconds = b["t"] - a["t"]
    total = sum(steps_per_worker)
    out = {"seconds": seconds, "steps": total, "tasks": {}}
    for name, end in sorted(b["tasks"].items()):
        start = a["tasks"].get(name)
        if start is None or start["pid"] != end["pid"]:
            continue
        cpu = end["cpu_s"] - start["cpu_s"]
        steps = steps_per_worker[int(name[6:])] if name.startswith("worker") else total
        row = {"cpu_s": cpu, "steps": steps, "cpu_ms_per_step": 1e3 * cpu / steps if steps else None}
        if end.get("quota_cores"):
            row["quota_cores"] = end["quota_cores"]
            row["quota_used"] = cpu / (seconds * end["quota_cores"])
            row["throttled_periods"] = end["nr_throttled"] - start["nr_throttled"]
            row["periods"] = end["nr_periods"] - start["nr_periods"]
            row["throttled_s"] = end["throttled_s"] - start["throttled_s"]
        out["tasks"][name] = row
    if a.get("client_cpu_s") is not None and b.get("client_cpu_s") is not None:
        cpu = b["client_cpu_s"] - a["client_cpu_s"]
        out["client"] = {"cpu_s": cpu, "cpu_ms_per_step": 1e3 * cpu / total if total else None}
    return out


def sample(args):
    """Snapshots of `--owner`'s cluster every `--interval` s, one JSON line each, until it exits."""
    with open(args.out, "w") as f:
        while process_cpu_s(args.owner) is not None:
            f.write(json.dumps(snapshot(args.owner, client=args.owner)) + "\n")
            f.flush()
            time.sleep(args.interval)
    return 0


def window(samples, train_seconds):
    """Indices (first, last) of the samples that bound the training window: it ends where the
    workers' summed CPU rate last falls below a third of its peak (the bench pauses them for its
    final evaluation) and starts `train_seconds` before. The span of the busy stretch that ends
    there is returned too, as a check (the workers' start-up is busy as well, so it is not used)."""

    def workers_cpu(s):
        return sum(t["cpu_s"] for n, t in s["tasks"].items() if n.startswith("worker"))

    # Only samples that see every worker of the run (the cluster comes up and goes down).
    names = max((set(s["tasks"]) for s in samples), key=len)
    full = [i for i, s in enumerate(samples) if set(s["tasks"]) == names]
    rates = [
        (workers_cpu(samples[j]) - workers_cpu(samples[i])) / (samples[j]["t"] - samples[i]["t"])
        for i, j in zip(full, full[1:])
    ]
    busy = [r > max(rates) / 3 for r in rates]
    end = max(k for k, b in enumerate(busy) if b)
    stretch = end
    while stretch > 0 and busy[stretch - 1]:
        stretch -= 1
    last = full[end + 1]
    start_t = samples[last]["t"] - train_seconds
    first = min(full, key=lambda i: abs(samples[i]["t"] - start_t))
    return first, last, samples[last]["t"] - samples[full[stretch]]["t"]


def rust(args):
    """Per-step CPU of a `tf-iaware bench --json` run (its first run) from its samples."""
    with open(args.samples) as f:
        samples = [json.loads(l) for l in f if l.strip()]
    with open(args.bench) as f:
        run = json.load(f)["runs"][0]
    first, last, busy_s = window(samples, run["train_seconds"])
    steps = [w["steps"] for w in run["workers"]]
    out = delta(samples[first], samples[last], steps)
    out.update(
        contender=run["contender"],
        images_per_sec=run["images_per_sec"],
        train_seconds=run["train_seconds"],
        eval_seconds=run["eval_seconds"],
        steps_per_worker=steps,
        busy_stretch_s=busy_s,
        sample_interval_s=(samples[-1]["t"] - samples[0]["t"]) / max(1, len(samples) - 1),
    )
    json.dump(out, sys.stdout if args.out is None else open(args.out, "w"), indent=2)
    print()
    return 0


def table(args):
    """A Markdown table of CPU ms per step per task from `cpu.sh`'s folder: tf-N.json (crosscheck
    --cpu) and rust-N.cpu.json (`rust` above)."""
    runs = []
    for path in sorted(glob.glob(os.path.join(args.dir, "tf-[0-9]*.json"))):
        with open(path) as f:
            r = json.load(f)["results"][0]
        runs.append(("TF2 " + path.rsplit("-", 1)[1][:-5], r["images_per_sec"], r["steps_per_worker"], r["cpu"]))
    for path in sorted(glob.glob(os.path.join(args.dir, "rust-[0-9]*.cpu.json"))):
        with open(path) as f:
            r = json.load(f)
        runs.append(("Rust " + path.rsplit("-", 1)[1].split(".")[0], r["images_per_sec"], r["steps_per_worker"], r))
    names = sorted({n for *_, c in runs for n in c["tasks"]}, key=lambda n: (n.startswith("ps"), n))
    head = ["run", "images/s", "window s"]
    head += ["%s: steps · CPU ms/step · quota used · throttled s" % n for n in names] + ["client ms/step"]
    print("| " + " | ".join(head) + " |")
    print("|---|---:|---:|" + "---|" * len(names) + "---:|")
    for label, ips, steps, c in runs:
        cells = [label, "%.1f" % ips, "%.1f" % c["seconds"]]
        for n in names:
            t = c["tasks"].get(n)
            if t is None:
                cells.append("-")
            elif "quota_used" in t:
                used = 100 * t["quota_used"]
                cells.append("%d · %.1f · %.0f %% · %.1f" % (t["steps"], t["cpu_ms_per_step"], used, t["throttled_s"]))
            else:
                cells.append("%d · %.1f" % (t["steps"], t["cpu_ms_per_step"]))
        client = c.get("client", {}).get("cpu_ms_per_step")
        cells.append("-" if client is None else "%.1f" % client)
        print("| " + " | ".join(cells) + " |")
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("sample", help="sample an owner's cluster until the owner exits")
    s.add_argument("--owner", type=int, required=True, help="pid of `tf-iaware bench` or `emulate`")
    s.add_argument("--interval", type=float, default=0.25)
    s.add_argument("--out", required=True)
    r = sub.add_parser("rust", help="per-step CPU of a bench run from its samples")
    r.add_argument("--samples", required=True)
    r.add_argument("--bench", required=True, help="the run's `tf-iaware bench --json` report")
    r.add_argument("--out")
    t = sub.add_parser("table", help="a Markdown table of a `cpu.sh` folder's runs")
    t.add_argument("dir")
    args = p.parse_args()
    return {"sample": sample, "rust": rust, "table": table}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
