"""herd from Python: herd's trainer, models and data sets (docs/python.md).

    import herd
    summary = herd.train(model="lenet5", data="fashion-mnist", epochs=2, lr=0.05)

Every keyword of herd.train is a flag of `herd train` with '_' for '-', checked by the
library as the command line checks it; failures raise herd.HerdError (herd.InvalidArgument,
also a ValueError, for refused values) carrying herd's message. Under `mpirun` or
`herd run -np N -- python3 script.py` every rank runs the script and trains its share
of each global batch, as `herd train` does.
"""
import atexit as _atexit
import numbers
import os

from . import _herd
from ._herd import HerdError, InvalidArgument

__all__ = ["HerdError", "InvalidArgument", "Dataset", "Model", "train", "init", "rank", "size",
           "local_rank", "shutdown", "models", "build_info", "__version__"]
__version__ = _herd.version


def init(comm_timeout=None, stall_warning=None):
    """Joins the job (MPI under mpirun, srun or herd run; a group of one otherwise).

    Called by anything that needs the group; call it first to set the stall inspector's
    warning and the abort timeout (seconds; herd train's --stall-warning, --comm-timeout).
    """
    _herd.init(comm_timeout=_seconds(comm_timeout, "comm_timeout"),
               stall_warning=_seconds(stall_warning, "stall_warning"))


def _seconds(value, what):
    """herd train's --comm-timeout and --stall-warning range; None (0 to the library): the
    environment's or the default."""
    if value is None:
        return 0.0
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = float("nan")
    if isinstance(value, bool) or not 0.1 <= seconds <= 1e6:  # NaN fails both
        raise InvalidArgument(f"{what} must be a number of seconds in [0.1, 1e+06], got {value!r}")
    return seconds


def rank():
    """This process's rank in the job."""
    return _herd.rank()


def size():
    """The number of ranks in the job."""
    return _herd.size()


def local_rank():
    """This process's rank among the ranks of its host."""
    return _herd.local_rank()


def shutdown():
    """Leaves the job (herd calls it at exit)."""
    _herd.shutdown()


_atexit.register(_herd.shutdown)


def models():
    """The model zoo: {name: description}."""
    return dict(_herd.zoo())


def build_info():
    """The version, the libraries this build uses and the CPU's instruction set."""
    return {"build": _herd.build_info(), "cpu_isa": _herd.cpu_isa(),
            "default_device": _herd.default_device()}


class Dataset:
    """A data set in memory: herd's specs ("fashion-mnist", "idx:DIR", "cifar10:DIR",
    "synthetic:C,H,W,CLASSES[,N]", "tokens:FILE") or NumPy arrays (from_numpy)."""

    def __init__(self, spec, split="train"):
        if split not in ("train", "test"):
            raise InvalidArgument(f"split is 'train' or 'test', got {split!r}")
        self.spec = spec
        self._ds = _herd.dataset_open(spec, split == "test")

    @classmethod
    def from_numpy(cls, images, labels, classes=None, mean=None, std=None):
        """images: uint8 pixels (0..255), N x C x H x W or N x H x W; labels: N integers in
        [0, classes). Both are copied. mean and std (one per channel, on [0, 1] pixels)
        normalise the images; by default they are these images' own: give a test set its
        train set's (train.normalization). Every rank must pass the same arrays: herd cuts
        each global batch among the ranks itself (the ranks check a hash of the data)."""
        import numpy as np
        images = np.asarray(images)
        labels = np.asarray(labels)
        if images.dtype != np.uint8:
            raise InvalidArgument(f"images must be uint8 pixels (0..255), got {images.dtype}; "
                                  "scale and convert them, e.g. (x * 255).round().astype(np.uint8)")
        if images.ndim == 3:
            images = images[:, None, :, :]
        if images.ndim != 4:
            raise InvalidArgument(f"images must be N x C x H x W or N x H x W, got shape {images.shape}")
        if labels.ndim != 1 or labels.shape[0] != images.shape[0]:
            raise InvalidArgument(f"labels must be one per image ({images.shape[0]}), got shape {labels.shape}")
        if not np.issubdtype(labels.dtype, np.integer):
            raise InvalidArgument(f"labels must be integers, got {labels.dtype}")
        if classes is None:
            classes = int(labels.max()) + 1 if labels.size else 0
        if isinstance(classes, bool) or not isinstance(classes, numbers.Integral) or not 2 <= classes <= 65536:
            raise InvalidArgument(f"classes must be in 2..65536, got {classes!r}" +
                                  (" (the labels' largest + 1)" if isinstance(classes, int) and classes > 65536 else ""))
        classes = int(classes)
        if labels.size and (labels.min() < 0 or labels.max() >= classes):
            bad = int(np.flatnonzero((labels < 0) | (labels >= classes))[0])
            raise InvalidArgument(f"label {bad} is {int(labels[bad])}, outside 0..{classes - 1} (classes {classes})")
        n, c, h, w = images.shape
        self = cls.__new__(cls)
        self.spec = f"numpy:{n}x{c}x{h}x{w}"
        self._ds = _herd.dataset_from_memory(np.ascontiguousarray(images),
                                             np.ascontiguousarray(labels, dtype=np.int32),
                                             n, c, h, w, int(classes), mean, std)
        return self

    def __len__(self):
        return self._ds.size()

    @property
    def shape(self):
        """(channels, height, width) of a sample."""
        return self._ds.shape()[:3]

    @property
    def classes(self):
        return self._ds.shape()[3]

    @property
    def normalization(self):
        """((mean per channel), (std per channel)) the loader normalises with."""
        return self._ds.normalization()

    def truncate(self, n):
        """Keeps the first n samples."""
        self._ds.truncate(int(n))
        return self

    def __repr__(self):
        return f"herd.Dataset({self.spec!r}, {len(self)} samples of {self.shape}, {self.classes} classes)"


class Model:
    """A model of herd's zoo (herd.models()) or a model file, on a device.

    The shape comes from data (a Dataset) or from shape=(C, H, W) and classes. Parameters
    start from seed, as `herd train --seed` starts them."""

    def __init__(self, name, data=None, shape=None, classes=None, device="cpu", seed=42,
                 precision=None, _plan=False):
        if data is None and (shape is None or classes is None):
            raise InvalidArgument("a model needs data= (a herd.Dataset) or shape=(C, H, W) and classes=")
        data = None if data is None else _as_dataset(data, "train", "Model")
        if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or not 0 <= seed <= 0x7fffffff:
            raise InvalidArgument(f"seed must be an integer in [0, 2147483647] (herd train's --seed), "
                                  f"got {seed!r}")
        if data is None and (isinstance(classes, bool) or not isinstance(classes, numbers.Integral) or classes < 2):
            raise InvalidArgument(f"classes must be an integer of 2 or more, got {classes!r}")
        self._m = _herd.model_create(name, data._ds if data is not None else None,
                                     tuple(shape) if shape is not None else (0, 0, 0),
                                     int(classes or 0), device, _plan)
        if not _plan:
            self._m.init(int(seed))
        if precision:
            self._m.set_precision(precision)

    @property
    def name(self):
        return self._m.info()["name"]

    @property
    def device(self):
        return self._m.info()["device"]

    @property
    def precision(self):
        return self._m.info()["precision"]

    @property
    def param_count(self):
        return self._m.info()["parameters"]

    @property
    def flops_per_sample(self):
        return self._m.info()["flops_per_sample"]

    def save(self, path):
        """The weights as safetensors (PyTorch's and NumPy's loaders read them)."""
        self._m.save(os.fspath(path))

    def load(self, path):
        self._m.load(os.fspath(path))

    def evaluate(self, data, batch_size=256, threads=0):
        """{"loss", "acc", "samples"} over a Dataset, or a data spec's test split."""
        data = _as_dataset(data, "test", "evaluate")
        loss, acc, samples = self._m.evaluate(data._ds, int(batch_size), int(threads))
        return {"loss": loss, "acc": acc, "samples": samples}

    def parameters(self):
        """{name: numpy.ndarray}: the model's parameters and buffers in place (no copy;
        writing to them changes the model). CPU models only."""
        import numpy as np
        return {name: np.asarray(t) for name, shape, t in self._m.tensors()}

    def __repr__(self):
        return f"herd.Model({self.name!r}, {self.param_count} parameters, {self.device}, {self.precision})"



def _as_dataset(data, split, what):
    """A Dataset as given, or a data spec's split ("synthetic:...", "fashion-mnist")."""
    if isinstance(data, Dataset):
        return data
    if isinstance(data, str):
        return Dataset(data, split)
    raise InvalidArgument(f"{what}: data is a herd.Dataset or a data spec string, got "
                          f"{type(data).__name__}")


def _option_text(name, value):
    if value is True:
        return None
    if value is False:
        return "false"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return str(value)


def _size_bytes(value, what):
    """A size as herd train's --memory-limit takes it: bytes, or K/M/G; at least 1M."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = str(value).upper().rstrip("B")
    try:
        if isinstance(value, bool):
            raise ValueError
        size = value if isinstance(value, int) else (
            int(text[:-1]) * units[text[-1]] if text and text[-1] in units else int(text))
    except (ValueError, KeyError):
        size = -1
    if not (1 << 20) <= size < (1 << 64):
        raise InvalidArgument(f"{what} takes a size of at least 1M like 300M or 4G, got {value!r}")
    return size


def _open(data, split, model_name, seq_len):
    ds = Dataset(data, split)
    tokens = ds._ds.seq_len()[1]
    if tokens:
        ds._ds.fit_seq_len(model_name, int(seq_len or 0))
    return ds


def train(model, data="fashion-mnist", test_data=None, *, device=None, precision=None, save=None,
          train_samples=None, test_samples=None, seq_len=None, memory_limit=None,
          gpu_memory_limit=None, progress=None, quiet=True, comm_timeout=None, stall_warning=None,
          seed=42, **options):
    """Trains as `herd train` does and returns its summary as a dict.

    model: a zoo name or model file (built here, like herd train --model), or a herd.Model
    (trained in place). data: a spec or a herd.Dataset; test_data: the test split (by
    default the spec's test split; none for a Dataset from NumPy). options: every training
    flag of `herd train` with '_' for '-' (epochs=2, batch_size=64, sync_bn=True,
    milestones=[30, 60], ...). progress: "console" for herd's progress bar on rank 0, or a
    callable receiving a dict after each step on every rank; returning False stops
    training (at once on one process, after the next step on several). quiet=False also
    prints herd's information lines."""
    init(comm_timeout, stall_warning)
    _herd.set_quiet(bool(quiet))
    # Under herd run --max-restarts: every attempt resumes from the checkpoints, with the
    # elastic batch herd run passes herd train as flags (unless the caller chose).
    if os.environ.get("HERD_RUN_SUPERVISED") and options.get("checkpoint_dir"):
        options.setdefault("resume", True)
        options.setdefault("elastic_batch", os.environ.get("HERD_RUN_ELASTIC_BATCH", "keep"))
        if os.environ.get("HERD_RUN_ELASTIC_RANKS"):
            options.setdefault("elastic_ranks", os.environ["HERD_RUN_ELASTIC_RANKS"])
    try:
        return _train(model, data, test_data, device, precision, save, train_samples, test_samples,
                      seq_len, memory_limit, gpu_memory_limit, progress, seed, options)
    except HerdError as e:
        if not getattr(e, "reported", False):
            _herd.report_failure(0, False, str(e))  # set-up: another attempt would repeat it
        raise


def _train(model, data, test_data, device, precision, save, train_samples, test_samples, seq_len,
           memory_limit, gpu_memory_limit, progress, seed, options):
    if device is None:
        device = _herd.default_device()
    # The rank's GPU and compute threads before the data and the model exist. A value that
    # is not a positive count waits for herd's own check of the options (its message).
    threads = options.get("threads")
    _herd.bind_device(device, threads if isinstance(threads, int) and threads > 0 else 0)
    if gpu_memory_limit is not None:
        if device == "cpu":
            raise InvalidArgument("gpu_memory_limit caps a GPU's memory: it needs device='cuda' or 'sim'")
        _herd.set_memory_limit(device, _size_bytes(gpu_memory_limit, "gpu_memory_limit"))
    if memory_limit is not None:
        _herd.set_memory_limit(device, _size_bytes(memory_limit, "memory_limit"))
    name = model if isinstance(model, (str, os.PathLike)) else None
    name = os.fspath(name) if name is not None else model.name
    if isinstance(data, Dataset):
        train_ds = data
        test_ds = test_data if isinstance(test_data, Dataset) or test_data is None else _open(test_data, "test", name, seq_len)
    else:
        train_ds = _open(data, "train", name, seq_len)
        test_ds = test_data if isinstance(test_data, Dataset) else _open(test_data or data, "test", name, seq_len)
    if train_samples is not None:  # 0 is refused by truncate, as --train-samples 0 is
        train_ds.truncate(train_samples)
    if test_samples is not None and test_ds is not None:
        test_ds.truncate(test_samples)
    texts = [("seed", str(seed))] + [(k, _option_text(k, v)) for k, v in options.items() if v is not None]
    if isinstance(model, Model):
        m = model
    else:
        stages = int(options.get("pipeline_stages") or 1)
        parts = int(options.get("tensor_parallel") or 1)
        # Pipeline stages and tensor parts build their own parameters: no rank holds the
        # whole model, unless its weights are to be saved (rank 0 collects them).
        m = Model(name, data=train_ds, device=device, seed=seed,
                  _plan=(stages > 1 or parts > 1) and not save)
    if precision:
        m._m.set_precision(precision)
    console = progress == "console"
    summary = _herd.train(m._m, train_ds._ds, test_ds._ds if test_ds is not None else None, texts,
                          None if console else progress, console)
    if save and rank() == 0:
        m.save(save)
    info = m._m.info()
    seq = train_ds._ds.seq_len()[0]
    out = {"model": info["name"], "epochs": summary["epochs"], "steps": summary["steps"],
           "train_loss": summary["train_loss"], "train_acc": summary["train_acc"],
           "test_loss": summary["test_loss"], "test_acc": summary["test_acc"],
           "samples_per_s": summary["samples_per_s"]}
    if seq > 0:
        out["tokens_per_s"] = summary["samples_per_s"] * seq
    out.update({"wall_s": summary["wall_s"], "ranks": size(), "device": info["device"],
                "precision": info["precision"]})
    out.update({k: v for k, v in summary.items() if k not in out})
    out["memory_peak_mib"] = summary["memory_peak_max_bytes"] / 1048576.0
    return out
