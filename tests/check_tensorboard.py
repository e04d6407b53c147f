"""Reads a herd event file with TensorBoard's own schema, not herd's reader.

usage: check_tensorboard.py PROTO_DIR EVENT_FILE METRICS_FILE [--histograms N]

PROTO_DIR holds TensorBoard's .proto files (tests/tensorboard_proto); they are compiled
with protoc --python_out into a temporary directory. The file's TFRecord framing is
checked (length, masked CRC-32C of the length, data, masked CRC-32C of the data), every
record is decoded as a tensorboard.Event and checked: file_version first, wall_time and
step never going back, no field TensorBoard does not know, the scalars' tags and values
equal to the --metrics file's lines in order, histograms well formed (bucket counts sum
to num, limits increasing, min <= mean <= max <= last limit), weights and gradients
every N steps. Prints what it read; exits 1 naming the first problem.
"""
import json
import math
import os
import struct
import subprocess
import sys
import tempfile
import time

# The --metrics keys behind each TensorBoard tag (src/obs/observer.c), per line kind.
STEP_TAGS = {
    "train/loss": "train_loss", "train/acc": "train_acc", "lr": "lr",
    "throughput/samples_per_s": "samples_per_s", "step_time/total_ms": "step_ms",
    "step_time/data_wait_ms": "data_wait_ms", "step_time/forward_ms": "forward_ms",
    "step_time/backward_ms": "backward_ms", "step_time/comm_wait_ms": "comm_wait_ms",
    "step_time/optimizer_ms": "optimizer_ms", "loss_scale": "loss_scale",
}
EPOCH_TAGS = {"epoch/train_loss": "train_loss", "epoch/train_acc": "train_acc",
              "test/loss": "test_loss", "test/acc": "test_acc"}


class Bad(Exception):
    pass


def crc32c_table():
    poly, table = 0x82F63B78, []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ poly if c & 1 else c >> 1
        table.append(c)
    return table


TABLE = crc32c_table()


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def masked_crc(data):
    """TFRecord's mask: rotate right by 15 bits and add a constant."""
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def records(path):
    """The data of every TFRecord in the file, CRCs verified."""
    blob = open(path, "rb").read()
    pos, out = 0, []
    while pos < len(blob):
        if pos + 12 > len(blob):
            raise Bad(f"{path}: record {len(out)} at byte {pos}: the file ends inside its header")
        header = blob[pos:pos + 8]
        (length,) = struct.unpack("<Q", header)
        (hcrc,) = struct.unpack("<I", blob[pos + 8:pos + 12])
        if hcrc != masked_crc(header):
            raise Bad(f"{path}: record {len(out)} at byte {pos}: length CRC {hcrc:#010x}, "
                      f"expected {masked_crc(header):#010x}")
        end = pos + 12 + length + 4
        if end > len(blob):
            raise Bad(f"{path}: record {len(out)} at byte {pos}: {length} bytes of data "
                      f"announced, the file ends first")
        data = blob[pos + 12:pos + 12 + length]
        (dcrc,) = struct.unpack("<I", blob[end - 4:end])
        if dcrc != masked_crc(data):
            raise Bad(f"{path}: record {len(out)} at byte {pos}: data CRC {dcrc:#010x}, "
                      f"expected {masked_crc(data):#010x}")
        out.append(data)
        pos = end
    return out


def compile_protos(proto_dir, out_dir):
    protos = []
    for root, _, files in os.walk(proto_dir):
        protos += [os.path.join(root, f) for f in files if f.endswith(".proto")]
    subprocess.run(["protoc", f"--proto_path={proto_dir}", f"--python_out={out_dir}"] + protos,
                   check=True)
    sys.path.insert(0, out_dir)
    from tensorboard.compat.proto import event_pb2  # noqa: E402 (generated above)
    return event_pb2


def no_unknown_fields(msg, where):
    if len(msg.UnknownFields()):
        raise Bad(f"{where}: {len(msg.UnknownFields())} field(s) TensorBoard's schema does not know")
    for field, value in msg.ListFields():
        if field.message_type is None:
            continue
        for sub in (value if field.label == field.LABEL_REPEATED else [value]):
            no_unknown_fields(sub, f"{where}.{field.name}")


def same_scalar(stored, logged):
    """simple_value is the float32 of the double the metrics file logged. cJSON may print
    that double a few units in its last place off (its round-trip test is approximate),
    which can move the float32 rounding by one step: allow one float32 unit."""
    return math.isclose(stored, logged, rel_tol=2.0 ** -23, abs_tol=0.0)


def check_histogram(h, where):
    limits, counts = list(h.bucket_limit), list(h.bucket)
    if not counts or len(limits) != len(counts):
        raise Bad(f"{where}: {len(counts)} buckets and {len(limits)} limits")
    if any(c < 0 or c != int(c) for c in counts) or sum(counts) != h.num:
        raise Bad(f"{where}: bucket counts {counts} sum to {sum(counts)}, num is {h.num}")
    if any(b <= a for a, b in zip(limits, limits[1:])):
        raise Bad(f"{where}: bucket limits not increasing: {limits}")
    if h.num > 0:
        mean = h.sum / h.num
        slack = 1e-6 * max(1.0, abs(h.min), abs(h.max))
        if not (h.min <= h.max <= limits[-1] and h.min - slack <= mean <= h.max + slack):
            raise Bad(f"{where}: min {h.min}, mean {mean}, max {h.max}, last limit {limits[-1]}")
        if h.sum_squares < 0 or h.sum_squares + slack < h.sum * h.sum / h.num:
            raise Bad(f"{where}: sum_squares {h.sum_squares} below sum^2/num")


def main(argv):
    args, every = argv[1:], 0
    if "--histograms" in args:
        i = args.index("--histograms")
        every = int(args[i + 1])
        del args[i:i + 2]
    if len(args) != 3:
        raise SystemExit(__doc__)
    proto_dir, event_path, metrics_path = args
    with tempfile.TemporaryDirectory() as out_dir:
        event_pb2 = compile_protos(proto_dir, out_dir)
        events = []
        for i, data in enumerate(records(event_path)):
            ev = event_pb2.Event()
            ev.ParseFromString(data)
            no_unknown_fields(ev, f"event {i}")
            events.append(ev)
    metrics = [json.loads(line) for line in open(metrics_path)]

    if not events or events[0].WhichOneof("what") != "file_version" \
            or events[0].file_version != "brain.Event:2":
        raise Bad("the first event is not file_version brain.Event:2")
    last_time, last_step = 0.0, -1
    scalars, histos = [], {}
    for i, ev in enumerate(events):
        if not (1e9 < ev.wall_time <= time.time() + 60) or ev.wall_time < last_time:
            raise Bad(f"event {i}: wall_time {ev.wall_time} after {last_time}")
        if ev.step < last_step:
            raise Bad(f"event {i}: step {ev.step} after {last_step}")
        last_time, last_step = ev.wall_time, ev.step
        if i == 0:
            continue
        if ev.WhichOneof("what") != "summary" or not ev.summary.value:
            raise Bad(f"event {i}: {ev.WhichOneof('what')}, not a summary with values")
        kinds = {v.WhichOneof("value") for v in ev.summary.value}
        if kinds == {"simple_value"}:
            scalars.append(ev)
        elif kinds == {"histo"} and len(ev.summary.value) == 1:
            v = ev.summary.value[0]
            check_histogram(v.histo, f"event {i} ({v.tag}, step {ev.step})")
            histos.setdefault(ev.step, {})[v.tag] = v.histo.num
        else:
            raise Bad(f"event {i}: values of kinds {sorted(kinds, key=str)}")

    if len(scalars) != len(metrics):
        raise Bad(f"{len(scalars)} scalar events, {len(metrics)} lines in {metrics_path}")
    for n, (ev, line) in enumerate(zip(scalars, metrics)):
        tags = EPOCH_TAGS if line["kind"] == "epoch" else STEP_TAGS
        want = {tag: line[key] for tag, key in tags.items() if key in line}
        got = {v.tag: v.simple_value for v in ev.summary.value}
        if ev.step != line["step"] or got.keys() != want.keys() \
                or not all(same_scalar(got[t], want[t]) for t in got):
            raise Bad(f"scalar event {n} (step {ev.step}) {got} != metrics line {n + 1} "
                      f"(step {line['step']}) {want}")

    if every:
        want_steps = list(range(every, last_step + 1, every))
        if sorted(histos) != want_steps:
            raise Bad(f"histograms at steps {sorted(histos)}, expected {want_steps}")
        for step, tags in histos.items():
            names = {t.split("/", 1)[1] for t in tags}
            if not names or tags.keys() != {f"{k}/{n}" for k in ("weights", "grads") for n in names} \
                    or any(tags[f"weights/{n}"] != tags[f"grads/{n}"] for n in names):
                raise Bad(f"step {step}: weight and gradient histograms do not pair: {tags}")
    elif histos:
        raise Bad(f"histograms at steps {sorted(histos)} without --histograms")
    print(f"{event_path}: ok ({len(events)} events: {len(scalars)} of scalars equal to the "
          f"metrics file, {sum(len(t) for t in histos.values())} histograms at "
          f"{len(histos)} steps)")


if __name__ == "__main__":
    try:
        main(sys.argv)
    except Bad as e:
        print(f"check_tensorboard: {e}", file=sys.stderr)
        sys.exit(1)
