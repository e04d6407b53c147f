"""Run by test_herd.py under the launcher, on every rank: DIR MODE.
train: herd.train as test_herd.py's CLI run, weights to DIR/py.st, "ranks=N" printed.
other-data: rank 1 passes other arrays; each rank prints "raised: <herd's message>".
restart: as train, with checkpoints every 2 steps, under herd run --max-restarts: in the
  first attempt rank 1 dies at step 7; the next resumes (herd.train reads the attempt).
tensor MODEL DATA: a GPT split over the ranks (tensor_parallel=2) as test_herd.py's CLI
  run, weights to DIR/tp.st."""
import os
import sys

import numpy as np

import herd

out, mode = sys.argv[1], sys.argv[2]
if mode == "train":
    s = herd.train("lenet5", data="synthetic:1,28,28,10,512", epochs=2, batch_size=64, threads=1,
                   lr=0.02, test_samples=128, save=f"{out}/py.st")
    if herd.rank() == 0:
        print(f"ranks={s['ranks']} size={herd.size()}")
elif mode == "tensor":
    herd.train(sys.argv[3], data=sys.argv[4], seq_len=32, batch_size=8, max_steps=10, threads=1,
               test_samples=16, optimizer="adamw", lr=0.003, tensor_parallel=2, save=f"{out}/tp.st")
elif mode == "other-data":
    x = np.full((64, 1, 28, 28), 7 + herd.rank(), np.uint8)
    y = np.arange(64) % 10
    try:
        herd.train("mlp", data=herd.Dataset.from_numpy(x, y, classes=10, mean=[0.5], std=[0.25]),
                   epochs=1, batch_size=16, threads=1)
        print(f"rank {herd.rank()}: trained on data that differs between ranks")
    except herd.HerdError as e:
        print(f"raised: {e}", flush=True)
elif mode == "restart":
    attempt = int(os.environ.get("HERD_RUN_RESTARTS", "0"))

    def crash(p):
        if attempt == 0 and herd.rank() == 1 and p["global_step"] == 7:
            os._exit(3)  # a rank dies mid-training
    s = herd.train("lenet5", data="synthetic:1,28,28,10,512", epochs=2, batch_size=64, threads=1,
                   lr=0.02, test_samples=128, save=f"{out}/py.st", checkpoint_dir=f"{out}/ck",
                   checkpoint_every_steps=2, progress=crash)
    if herd.rank() == 0:
        print(f"attempt={attempt} restarts={s['restarts']} lost_steps={s['lost_steps']}")
