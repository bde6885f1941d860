#!/usr/bin/env python3
"""Real-TensorFlow cross-check of tf-iaware's data-parallel contenders.

Runs TensorFlow's own distributed recipes against an emulated cluster started by
`tf-iaware emulate --chief --tf-config-out F.json` (its workers and ps are TensorFlow gRPC
servers in `tf-iaware worker` processes under CPU quotas), training the zoo `lenet` with the
zoo's optimizer (momentum SGD, lr 0.01, momentum 0.9, `ResourceApplyMomentum` on the ps):

  ps      TF2 `tf.distribute.experimental.ParameterServerStrategy` +
          `ClusterCoordinator`: every worker steps on its own batch as fast as it can, its
          gradient applied on the ps when it arrives (tf-iaware's `async-ps`);
  sync    TF1 in-graph replication with `replica_device_setter` (variables on the ps, one
          tower per worker with equal shares, gradients averaged and applied once per step,
          one `session.run` per step through one master) (tf-iaware's `replica-setter`);
  backup  TF1 `SyncReplicasOptimizer` with N-1 of N gradients per step, between-graph: one
          graph and session per worker (threads of this process) and the chief's queue runner
          (tf-iaware's `sync-backup`).

Images/s counts every gradient computed (dropped backup gradients included), as tf-iaware
does. Data are synthetic (a fixed random batch per worker): throughput is what is compared.

Optional: when `import tensorflow` fails the script says so and exits 0. Each mode runs in a
child process of its own (TF1 graph mode and TF2 eager cannot share one).
"""

import argparse
import json
import os
import subprocess
import sys
import threading
import time

MODES = ("ps", "sync", "backup", "async1")
RUST_NAME = {"ps": "async-ps", "sync": "replica-setter", "backup": "sync-backup", "async1": "async-ps"}
RECIPE = {
    "ps": "TF2 ParameterServerStrategy + ClusterCoordinator",
    "async1": "TF1 between-graph asynchronous replication",
    "sync": "TF1 replica_device_setter, in-graph replication",
    "backup": "TF1 SyncReplicasOptimizer, N-1 of N",
}
IMAGE = (28, 28, 1)
CLASSES = 10
LEARNING_RATE = 0.01
MOMENTUM = 0.9
# name, shape, stddev of the truncated-normal initialiser (0: zeros), as tf-iaware's zoo.
LAYERS = [
    ("conv1/kernel", (5, 5, 1, 6)),
    ("conv1/bias", (6,)),
    ("conv2/kernel", (5, 5, 6, 16)),
    ("conv2/bias", (16,)),
    ("fc1/kernel", (400, 120)),
    ("fc1/bias", (120,)),
    ("fc2/kernel", (120, 84)),
    ("fc2/bias", (84,)),
    ("logits/kernel", (84, CLASSES)),
    ("logits/bias", (CLASSES,)),
]


def initial_value(tf, name, shape, seed):
    if name.endswith("/bias"):
        return tf.zeros(shape)
    fan_in = 1
    for d in shape[:-1]:
        fan_in *= d
    return tf.random.truncated_normal(shape, stddev=(2.0 / fan_in) ** 0.5, seed=seed)


def logits_of(tf, p, x):
    """lenet: conv5x5 6 SAME+relu, maxpool2, conv5x5 16 VALID+relu, maxpool2, fc 400-120-84-10."""
    h = tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(x, p["conv1/kernel"], 1, "SAME"), p["conv1/bias"]))
    h = tf.nn.max_pool2d(h, 2, 2, "VALID")
    h = tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(h, p["conv2/kernel"], 1, "VALID"), p["conv2/bias"]))
    h = tf.nn.max_pool2d(h, 2, 2, "VALID")
    h = tf.reshape(h, [-1, 400])
    h = tf.nn.relu(tf.nn.bias_add(tf.matmul(h, p["fc1/kernel"]), p["fc1/bias"]))
    h = tf.nn.relu(tf.nn.bias_add(tf.matmul(h, p["fc2/kernel"]), p["fc2/bias"]))
    return tf.nn.bias_add(tf.matmul(h, p["logits/kernel"]), p["logits/bias"])


def loss_of(tf, p, x, y):
    return tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(labels=y, logits=logits_of(tf, p, x)))


def synthetic_batch(batch, seed):
    import numpy as np

    rng = np.random.default_rng(seed)
    x = rng.random((batch,) + IMAGE, dtype=np.float32)
    y = np.eye(CLASSES, dtype=np.float32)[rng.integers(0, CLASSES, batch)]
    return x, y


def session_config(tf, args, isolate):
    """The ConfigProto: tf-iaware's (`--config rust`: Grappler's remapper off so ops stay where
    placed, isolated session state) or TensorFlow's defaults (`--config stock`)."""
    config = tf.compat.v1.ConfigProto()
    # The cluster lists a chief for the TF2 coordinator; a TF1 master would wait for it to
    # answer device discovery, so sessions see the worker and ps tasks only.
    config.device_filters.extend(["/job:ps", "/job:worker"])
    if args.config == "rust":
        from tensorflow.core.protobuf import rewriter_config_pb2

        config.graph_options.rewrite_options.remapping = rewriter_config_pb2.RewriterConfig.OFF
        config.isolate_session_state = isolate
    return config


def jobs(cluster_doc):
    return {k: v for k, v in cluster_doc["cluster"].items() if k in ("worker", "ps", "chief")}


def master_target(cluster_doc, which, worker=0):
    c = cluster_doc["cluster"]
    if which == "ps0":
        return "grpc://" + c["ps"][0]
    if which == "own":
        return "grpc://" + c["worker"][worker]
    return "grpc://" + c["worker"][0]


def cpu_snapshot(doc, args):
    """With `--cpu`, a function that snapshots the CPU time of the cluster's tasks and of this
    process (`cpustat.py`, beside this script); else None."""
    if not args.cpu:
        return None
    import cpustat

    owner = doc["emulated"]["owner_pid"]
    return lambda: cpustat.snapshot(owner)


# ---------------------------------------------------------------------------------------- ps
def run_ps(doc, args):
    import tensorflow as tf

    snapshot = cpu_snapshot(doc, args)
    setup = snapshot and snapshot()
    spec = tf.train.ClusterSpec(jobs(doc))
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
        spec, task_type="chief", task_id=0, rpc_layer="grpc"
    )
    strategy = tf.distribute.experimental.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
    n = len(doc["cluster"]["worker"])
    batch = args.per_worker_batch
    with strategy.scope():
        params = {
            name: tf.Variable(initial_value(tf, name, shape, args.seed + i), name=name)
            for i, (name, shape) in enumerate(LAYERS)
        }
        slots = {name: tf.Variable(tf.zeros(shape), name=name + "/Momentum") for name, shape in LAYERS}
    devices = sorted({v.device for v in list(params.values()) + list(slots.values())})

    def dataset_fn():
        x = tf.random.stateless_uniform((batch,) + IMAGE, seed=[args.seed, 1])
        labels = tf.random.stateless_uniform([batch], seed=[args.seed, 2], maxval=CLASSES, dtype=tf.int32)
        return tf.data.Dataset.from_tensors((x, tf.one_hot(labels, CLASSES))).repeat()

    iterator = iter(coordinator.create_per_worker_dataset(dataset_fn))

    # Each worker's index, resident on that worker, so every step says where it ran.
    def index_fn(i):
        return tf.function(lambda: tf.constant(i, tf.int32))

    workers = coordinator._cluster.workers  # pylint: disable=protected-access
    per_worker_index = tf.distribute.experimental.coordinator.PerWorkerValues(
        tuple(w.create_resource(index_fn(i)) for i, w in enumerate(workers))
    )

    names = [name for name, _ in LAYERS]

    @tf.function
    def step_fn(it, index):
        def replica_fn(x, y):
            with tf.GradientTape() as tape:
                loss = loss_of(tf, params, x, y)
            grads = tape.gradient(loss, [params[k] for k in names])
            for k, g in zip(names, grads):
                tf.raw_ops.ResourceApplyMomentum(
                    var=params[k].handle,
                    accum=slots[k].handle,
                    lr=tf.constant(LEARNING_RATE),
                    grad=g,
                    momentum=tf.constant(MOMENTUM),
                )
            return loss

        # `--steps-per-call` > 1: several steps per scheduled function (as Keras's
        # `steps_per_execution`), so the coordinator's dispatch is paid once for them.
        for _ in range(args.steps_per_call):
            x, y = next(it)
            loss = strategy.run(replica_fn, args=(x, y))
        return loss, index

    def schedule():
        return coordinator.schedule(step_fn, args=(iterator, per_worker_index))

    for _ in range(args.warmup_steps * n):
        schedule()
    coordinator.join()
    cap = 2 * n  # at most one step running per worker and about one queued for each
    not_ready = None
    try:
        from tensorflow.python.distribute.coordinator import remote_value

        not_ready = remote_value.RemoteValueStatus.NOT_READY
    except ImportError:
        pass
    done = []
    inflight = []
    before = snapshot and snapshot()
    start = time.perf_counter()
    while time.perf_counter() - start < args.seconds:
        if not_ready is not None:
            while True:
                still = [r for r in inflight if getattr(r, "_status", None) is not_ready]
                done.extend(r for r in inflight if getattr(r, "_status", None) is not not_ready)
                inflight = still
                if len(inflight) < cap:
                    break
                time.sleep(0.002)
            inflight.append(schedule())
        else:  # no status to poll: schedule a round and wait for it
            inflight.extend(schedule() for _ in range(cap))
            coordinator.join()
    coordinator.join()
    elapsed = time.perf_counter() - start
    after = snapshot and snapshot()
    done.extend(inflight)
    steps = [0] * n
    losses = []
    for rv in done:
        loss, index = rv.fetch()
        steps[int(index)] += args.steps_per_call
        losses.append(float(loss))
    total = sum(steps)
    result = {
        "steps_per_worker": steps,
        "batch_per_worker": [batch] * n,
        "steps": total,
        "updates": total,
        "seconds": elapsed,
        "images_per_sec": total * batch / elapsed,
        "loss_first": losses[0] if losses else None,
        "loss_last": losses[-1] if losses else None,
        "variable_devices": devices,
        "steps_per_call": args.steps_per_call,
    }
    if snapshot:
        import cpustat

        # The timed window per task, and what setting up (strategy, functions, warm-up) cost.
        result["cpu"] = cpustat.delta(before, after, steps)
        warmup = cpustat.delta(setup, before, [0] * n)
        result["cpu_setup_s"] = {k: v["cpu_s"] for k, v in warmup["tasks"].items()}
        result["cpu_setup_s"]["client"] = warmup["client"]["cpu_s"]
    return result


# -------------------------------------------------------------------------------------- sync
def run_sync(doc, args):
    import tensorflow as tf

    tf.compat.v1.disable_eager_execution()
    n = len(doc["cluster"]["worker"])
    batch = args.per_worker_batch
    graph = tf.Graph()
    with graph.as_default(), tf.compat.v1.container("crosscheck-sync-%d" % os.getpid()):
        setter = tf.compat.v1.train.replica_device_setter(ps_tasks=1, worker_device="/job:worker/task:0")
        with tf.compat.v1.device(setter):
            params = {
                name: tf.Variable(initial_value(tf, name, shape, args.seed + i), name=name)
                for i, (name, shape) in enumerate(LAYERS)
            }
        names = [name for name, _ in LAYERS]
        inputs, losses, tower_grads = [], [], []
        for k in range(n):
            with tf.device("/job:worker/task:%d" % k), tf.name_scope("replica_%d" % k):
                x = tf.compat.v1.placeholder(tf.float32, (batch,) + IMAGE, name="x")
                y = tf.compat.v1.placeholder(tf.float32, (batch, CLASSES), name="y")
                loss = loss_of(tf, params, x, y)
                tower_grads.append(tf.gradients(loss, [params[k2] for k2 in names]))
                inputs.append((x, y))
                losses.append(loss)
        with tf.device("/job:ps/task:0"):
            mean = [tf.add_n(list(gs)) / float(n) for gs in zip(*tower_grads)]
            optimizer = tf.compat.v1.train.MomentumOptimizer(LEARNING_RATE, MOMENTUM)
            train = optimizer.apply_gradients(list(zip(mean, [params[k] for k in names])))
            total_loss = tf.add_n(losses) / float(n)
        init = tf.compat.v1.global_variables_initializer()
    target = master_target(doc, args.sync_master)
    batches = [synthetic_batch(batch, args.seed + k) for k in range(n)]
    feeds = {t: v for (x, y), (bx, by) in zip(inputs, batches) for t, v in ((x, bx), (y, by))}
    with tf.compat.v1.Session(target, graph=graph, config=session_config(tf, args, True)) as sess:
        sess.run(init)
        first = None
        for _ in range(max(1, args.warmup_steps)):
            value = sess.run([train, total_loss], feeds)[1]
            first = value if first is None else first
        steps = 0
        last = None
        start = time.perf_counter()
        while time.perf_counter() - start < args.seconds:
            last = sess.run([train, total_loss], feeds)[1]
            steps += 1
        elapsed = time.perf_counter() - start
    return {
        "steps_per_worker": [steps] * n,
        "batch_per_worker": [batch] * n,
        "steps": steps,
        "updates": steps,
        "seconds": elapsed,
        "images_per_sec": steps * batch * n / elapsed,
        "loss_first": float(first) if first is not None else None,
        "loss_last": float(last) if last is not None else None,
        "master": target,
    }


# ------------------------------------------------------------------------------------ backup
def run_backup(doc, args):
    import tensorflow as tf

    tf.compat.v1.disable_eager_execution()
    n = len(doc["cluster"]["worker"])
    if n < 2:
        raise SystemExit("backup: needs at least 2 workers")
    batch = args.per_worker_batch
    container = "crosscheck-backup-%d" % os.getpid()
    names = [name for name, _ in LAYERS]
    # Between-graph replication, as N worker processes would build it: one graph per worker.
    built = []
    for k in range(n):
        graph = tf.Graph()
        with graph.as_default(), tf.compat.v1.container(container):
            setter = tf.compat.v1.train.replica_device_setter(ps_tasks=1, worker_device="/job:worker/task:%d" % k)
            with tf.compat.v1.device(setter):
                global_step = tf.compat.v1.train.get_or_create_global_step()
                params = {
                    name: tf.compat.v1.get_variable(
                        name,
                        initializer=initial_value(tf, name, shape, args.seed + i),
                        use_resource=True,
                    )
                    for i, (name, shape) in enumerate(LAYERS)
                }
                x = tf.compat.v1.placeholder(tf.float32, (batch,) + IMAGE, name="x")
                y = tf.compat.v1.placeholder(tf.float32, (batch, CLASSES), name="y")
                loss = loss_of(tf, params, x, y)
                opt = tf.compat.v1.train.SyncReplicasOptimizer(
                    tf.compat.v1.train.MomentumOptimizer(LEARNING_RATE, MOMENTUM),
                    replicas_to_aggregate=n - args.backup_workers,
                    total_num_replicas=n,
                )
                grads = opt.compute_gradients(loss, var_list=[params[m] for m in names])
                train = opt.apply_gradients(grads, global_step=global_step)
                entry = {
                    "graph": graph,
                    "x": x,
                    "y": y,
                    "loss": loss,
                    "train": train,
                    "global_step": global_step,
                    "local_init": opt.local_step_init_op,
                    "ready": opt.ready_for_local_init_op,
                }
                if k == 0:
                    entry["chief_init"] = opt.chief_init_op
                    entry["init_tokens"] = opt.get_init_tokens_op()
                    entry["sync"] = opt.get_chief_queue_runner().enqueue_ops[0]
                    entry["init"] = tf.compat.v1.global_variables_initializer()
                entry["local_vars_init"] = tf.compat.v1.local_variables_initializer()
        built.append(entry)
    # Variables, accumulators and the token queue are shared by name on the ps between the
    # sessions, as between worker processes: the sessions must not isolate their state.
    sessions = [
        tf.compat.v1.Session(
            master_target(doc, args.sync_master, k),
            graph=b["graph"],
            config=session_config(tf, args, False),
        )
        for k, b in enumerate(built)
    ]
    chief = built[0]
    sessions[0].run(chief["init"])
    for s, b in zip(sessions, built):
        s.run(b["local_vars_init"])
    sessions[0].run(chief["chief_init"])
    for s, b in zip(sessions[1:], built[1:]):
        s.run(b["local_init"])
    sessions[0].run(chief["init_tokens"])
    stop = threading.Event()
    errors = []
    steps = [0] * n
    counting = threading.Event()
    losses = {}

    def chief_loop():
        try:
            while not stop.is_set():
                sessions[0].run(chief["sync"], options=tf.compat.v1.RunOptions(timeout_in_ms=10_000))
        except tf.errors.DeadlineExceededError:
            pass
        except Exception as e:  # noqa: BLE001 - reported below
            if not stop.is_set():
                errors.append("chief: %r" % e)

    def worker_loop(k):
        b = built[k]
        bx, by = synthetic_batch(batch, args.seed + k)
        feeds = {b["x"]: bx, b["y"]: by}
        try:
            while not stop.is_set():
                value = sessions[k].run(
                    [b["train"], b["loss"]],
                    feeds,
                    options=tf.compat.v1.RunOptions(timeout_in_ms=10_000),
                )[1]
                if counting.is_set():
                    steps[k] += 1
                    losses.setdefault(k, [value, value])[1] = value
        except tf.errors.DeadlineExceededError:
            pass
        except Exception as e:  # noqa: BLE001 - reported below
            if not stop.is_set():
                errors.append("worker %d: %r" % (k, e))

    threads = [threading.Thread(target=chief_loop, daemon=True)]
    threads += [threading.Thread(target=worker_loop, args=(k,), daemon=True) for k in range(n)]
    for t in threads:
        t.start()
    # Warm-up: until the chief has applied a few steps.
    deadline = time.perf_counter() + 120
    while sessions[0].run(chief["global_step"]) < args.warmup_steps and time.perf_counter() < deadline:
        time.sleep(0.05)
    start_step = sessions[0].run(chief["global_step"])
    counting.set()
    start = time.perf_counter()
    time.sleep(args.seconds)
    counting.clear()
    elapsed = time.perf_counter() - start
    end_step = sessions[0].run(chief["global_step"])
    stop.set()
    if errors:
        raise RuntimeError("; ".join(errors))
    total = sum(steps)
    updates = int(end_step - start_step)
    return {
        "steps_per_worker": steps,
        "batch_per_worker": [batch] * n,
        "steps": total,
        "updates": updates,
        "dropped_gradients": max(0, total - updates * (n - args.backup_workers)),
        "seconds": elapsed,
        "images_per_sec": total * batch / elapsed,
        "loss_first": float(losses[0][0]) if 0 in losses else None,
        "loss_last": float(losses[0][1]) if 0 in losses else None,
        "master": master_target(doc, args.sync_master, 0),
    }


# ------------------------------------------------------------------------------------ async1
def run_async1(doc, args):
    """TF1 between-graph asynchronous replication (the stock TF1 recipe before TF2's
    ParameterServerStrategy): one graph and session per worker, plain momentum updates on the ps,
    no barrier. With `--sync-master own` each worker's session is mastered by its own server."""
    import tensorflow as tf

    tf.compat.v1.disable_eager_execution()
    n = len(doc["cluster"]["worker"])
    batch = args.per_worker_batch
    container = "crosscheck-async1-%d" % os.getpid()
    names = [name for name, _ in LAYERS]
    built = []
    for k in range(n):
        graph = tf.Graph()
        with graph.as_default(), tf.compat.v1.container(container):
            setter = tf.compat.v1.train.replica_device_setter(ps_tasks=1, worker_device="/job:worker/task:%d" % k)
            with tf.compat.v1.device(setter):
                params = {
                    name: tf.compat.v1.get_variable(
                        name, initializer=initial_value(tf, name, shape, args.seed + i), use_resource=True
                    )
                    for i, (name, shape) in enumerate(LAYERS)
                }
                x = tf.compat.v1.placeholder(tf.float32, (batch,) + IMAGE, name="x")
                y = tf.compat.v1.placeholder(tf.float32, (batch, CLASSES), name="y")
                loss = loss_of(tf, params, x, y)
                opt = tf.compat.v1.train.MomentumOptimizer(LEARNING_RATE, MOMENTUM)
                train = opt.minimize(loss, var_list=[params[m] for m in names])
                init = tf.compat.v1.global_variables_initializer()
        built.append({"graph": graph, "x": x, "y": y, "loss": loss, "train": train, "init": init})
    sessions = [
        tf.compat.v1.Session(master_target(doc, args.sync_master, k), graph=b["graph"], config=session_config(tf, args, False))
        for k, b in enumerate(built)
    ]
    sessions[0].run(built[0]["init"])
    stop = threading.Event()
    counting = threading.Event()
    steps = [0] * n
    errors = []

    def worker_loop(k):
        b = built[k]
        bx, by = synthetic_batch(batch, args.seed + k)
        feeds = {b["x"]: bx, b["y"]: by}
        try:
            for _ in range(args.warmup_steps):
                sessions[k].run(b["train"], feeds)
            while not stop.is_set():
                sessions[k].run([b["train"], b["loss"]], feeds)
                if counting.is_set():
                    steps[k] += 1
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append("worker %d: %r" % (k, e))

    threads = [threading.Thread(target=worker_loop, args=(k,), daemon=True) for k in range(n)]
    for t in threads:
        t.start()
    time.sleep(5.0)  # warm-up
    counting.set()
    start = time.perf_counter()
    time.sleep(args.seconds)
    counting.clear()
    elapsed = time.perf_counter() - start
    stop.set()
    if errors:
        raise RuntimeError("; ".join(errors))
    total = sum(steps)
    return {
        "steps_per_worker": steps,
        "batch_per_worker": [batch] * n,
        "steps": total,
        "updates": total,
        "seconds": elapsed,
        "images_per_sec": total * batch / elapsed,
        "master": master_target(doc, args.sync_master, 0),
    }


# ------------------------------------------------------------------------------------ driver
def child(args):
    with open(args.cluster) as f:
        doc = json.load(f)
    run = {"ps": run_ps, "sync": run_sync, "backup": run_backup, "async1": run_async1}[args.child]
    result = run(doc, args)
    result.update(mode=args.child, recipe=RECIPE[args.child], rust_contender=RUST_NAME[args.child])
    sys.stdout.write("RESULT " + json.dumps(result) + "\n")
    sys.stdout.flush()
    # ClusterCoordinator's threads and gRPC channels may keep the interpreter from exiting.
    os._exit(0)


def table(results, rust):
    lines = [
        "%-8s %-16s %12s %12s %8s  %s" % ("mode", "contender", "TF images/s", "Rust img/s", "diff", "steps per worker (TF | Rust)")
    ]
    for r in results:
        if "error" in r:
            lines.append("%-8s %-16s %12s  %s" % (r["mode"], RUST_NAME[r["mode"]], "failed", r["error"][:80]))
            continue
        mine = rust.get(RUST_NAME[r["mode"]])
        diff = "-" if not mine else "%+.0f %%" % (100.0 * (mine["images_per_sec"] / r["images_per_sec"] - 1.0))
        lines.append(
            "%-8s %-16s %12.1f %12s %8s  %s | %s"
            % (
                r["mode"],
                r["rust_contender"],
                r["images_per_sec"],
                "-" if not mine else "%.1f" % mine["images_per_sec"],
                diff,
                r["steps_per_worker"],
                "-" if not mine else mine["steps_per_worker"],
            )
        )
    return "\n".join(lines)


def rust_figures(path):
    """Images/s and steps per worker of each contender in a `tf-iaware bench --data digits
    --json` report (median images/s over rounds; steps of the first round)."""
    if not path:
        return {}
    with open(path) as f:
        report = json.load(f)
    out = {}
    for s in report.get("summaries", []):
        out[s["contender"]] = {"images_per_sec": s["median_images_per_sec"]}
    for run in report.get("runs", []):
        entry = out.setdefault(run["contender"], {"images_per_sec": run["images_per_sec"]})
        entry.setdefault("steps_per_worker", [w["steps"] for w in run["workers"]])
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cluster", required=True, help="cluster JSON of `tf-iaware emulate --chief --tf-config-out F.json`")
    p.add_argument("--modes", default="ps,sync,backup", help="comma-separated: ps, sync, backup, async1")
    p.add_argument("--seconds", type=float, default=30.0, help="timed window per mode (default 30)")
    p.add_argument("--warmup-steps", type=int, default=3, help="untimed steps first (per worker for ps)")
    p.add_argument("--per-worker-batch", type=int, default=16, help="images per worker per step (default 16)")
    p.add_argument("--backup-workers", type=int, default=1, help="backup workers of `backup` (default 1)")
    p.add_argument(
        "--sync-master",
        choices=("ps0", "worker0", "own"),
        default="ps0",
        help="session target of sync/backup: ps0 (as tf-iaware), worker0 (TF1's chief), own (backup: each worker's own)",
    )
    p.add_argument("--config", choices=("rust", "stock"), default="rust", help="ConfigProto: tf-iaware's or TensorFlow's defaults")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument(
        "--steps-per-call",
        type=int,
        default=1,
        help="ps mode: training steps per function the coordinator schedules (default 1)",
    )
    p.add_argument(
        "--cpu",
        action="store_true",
        help="ps mode: each task's CPU time, CPU ms per step and throttling over the window (cpustat.py)",
    )
    p.add_argument("--repeats", type=int, default=1, help="rounds over the modes")
    p.add_argument("--rust-json", help="a `tf-iaware bench --data digits --json` report to put beside")
    p.add_argument("--out", help="write the results as JSON here")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds a mode may take in all")
    p.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    args = p.parse_args()
    if not (0 < args.seconds <= 3600):
        p.error("--seconds must be in (0, 3600]")
    if not (1 <= args.per_worker_batch <= 4096):
        p.error("--per-worker-batch must be in 1..=4096")
    if not (1 <= args.steps_per_call <= 1000):
        p.error("--steps-per-call must be in 1..=1000")
    try:
        import tensorflow as tf  # noqa: F401
    except Exception as e:  # noqa: BLE001 - any import failure means "skip"
        print("skip: Python TensorFlow is not importable (%s); the cross-check is optional" % e)
        return 0
    if args.child:
        return child(args)
    if not tf.__version__.startswith("2.21"):
        print("note: TensorFlow %s, the project links 2.21" % tf.__version__, file=sys.stderr)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    for m in modes:
        if m not in MODES:
            p.error("--modes: `%s` is not one of %s" % (m, ", ".join(MODES)))
    try:
        with open(args.cluster) as f:
            doc = json.load(f)
        if not doc["cluster"]["worker"] or not doc["cluster"]["ps"]:
            raise KeyError("worker or ps")
    except (OSError, ValueError, KeyError, TypeError) as e:
        p.error("--cluster %s: not a cluster JSON with worker and ps jobs (%s)" % (args.cluster, e))
    if "ps" in modes and "chief" not in doc.get("cluster", {}):
        print("note: the cluster has no chief; the coordinator picks its own port", file=sys.stderr)
    results = []
    for round_ in range(args.repeats):
        for m in modes:
            cmd = [sys.executable, os.path.abspath(__file__), "--child", m]
            for flag in (
                "cluster",
                "seconds",
                "warmup_steps",
                "per_worker_batch",
                "backup_workers",
                "sync_master",
                "config",
                "seed",
                "steps_per_call",
            ):
                cmd += ["--" + flag.replace("_", "-"), str(getattr(args, flag))]
            if args.cpu:
                cmd.append("--cpu")
            print("round %d: %s (%s) ..." % (round_ + 1, m, RECIPE[m]), file=sys.stderr)
            env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL=os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2"))
            try:
                out = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, env=env)
                line = next((l for l in out.stdout.splitlines() if l.startswith("RESULT ")), None)
                if line is None:
                    tail = "\n".join((out.stderr or "").strip().splitlines()[-6:])
                    result = {"mode": m, "error": "exit %s: %s" % (out.returncode, tail)}
                else:
                    result = json.loads(line[len("RESULT "):])
            except subprocess.TimeoutExpired:
                result = {"mode": m, "error": "timed out after %.0f s" % args.timeout}
            result["round"] = round_ + 1
            results.append(result)
            if "error" in result:
                print("  %s failed: %s" % (m, result["error"]), file=sys.stderr)
            else:
                print("  %.1f images/s, steps per worker %s" % (result["images_per_sec"], result["steps_per_worker"]), file=sys.stderr)
    rust = rust_figures(args.rust_json)
    report = {
        "tensorflow": tf.__version__,
        "cluster": doc.get("emulated", {}).get("scenario"),
        "seconds": args.seconds,
        "per_worker_batch": args.per_worker_batch,
        "config": args.config,
        "sync_master": args.sync_master,
        "results": results,
        "rust": rust,
    }
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=2)
    print(table(results, rust))
    return 0


if __name__ == "__main__":
    sys.exit(main())
