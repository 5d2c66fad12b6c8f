#!/usr/bin/env python3
"""Writes the small data files of README's "Train, evaluate, predict" session and of
tests/model_roundtrip.rs (deterministic: `python3 examples/data/make_data.py`).

- ratings.base / ratings.test: MovieLens u1.base/u1.test layout (user<TAB>item<TAB>rating
  <TAB>timestamp), 80 users x 50 items, rating = 3.5 + user bias + item bias + a rank-2
  taste term + noise, rounded to 0.5 and clipped to [1, 5]; each user's ratings split 80/20.
- regression.train / regression.test (LIBSVM): y = x . w + noise, 40 features, 6 of
  them non-zero in w.
- classes.train / classes.test (LIBSVM): labels 0/1 from a sparse linear score.
- docs.train / docs.test (UCI docword) and vocab.txt: 4 topics over 40 words.
"""
import math
import os
import random

HERE = os.path.dirname(os.path.abspath(__file__))
rng = random.Random(11)


def write(name, lines):
    with open(os.path.join(HERE, name), "w") as f:
        f.write("".join(line + "\n" for line in lines))


# Ratings.
users, items, rank = 80, 50, 2
ub = [rng.gauss(0, 0.5) for _ in range(users)]
ib = [rng.gauss(0, 0.5) for _ in range(items)]
p = [[rng.gauss(0, 0.6) for _ in range(rank)] for _ in range(users)]
q = [[rng.gauss(0, 0.6) for _ in range(rank)] for _ in range(items)]
base, test = [], []
for u in range(users):
    rated = sorted(rng.sample(range(items), 20))
    rng.shuffle(rated)
    for n, i in enumerate(rated):
        r = 3.5 + ub[u] + ib[i] + sum(a * b for a, b in zip(p[u], q[i])) + rng.gauss(0, 0.3)
        r = min(5.0, max(1.0, round(r * 2) / 2))
        line = f"{u + 1}\t{i + 101}\t{r:g}\t{880000000 + u * 1000 + n}"
        (test if n < 4 else base).append(line)
write("ratings.base", sorted(base, key=lambda s: (int(s.split()[0]), int(s.split()[1]))))
write("ratings.test", sorted(test, key=lambda s: (int(s.split()[0]), int(s.split()[1]))))


def sparse_row(n_features, density):
    return {j: round(rng.gauss(0, 1), 3) for j in range(n_features) if rng.random() < density}


def libsvm(label, row):
    feats = " ".join(f"{j + 1}:{v:g}" for j, v in sorted(row.items()))
    return f"{label:g} {feats}".rstrip()


# Regression.
nf = 40
w = [0.0] * nf
for j, v in zip([0, 3, 7, 12, 20, 33], [3.0, -2.0, 1.5, 2.5, -1.0, 1.0]):
    w[j] = v
rows = []
for _ in range(300):
    x = sparse_row(nf, 0.3)
    y = sum(w[j] * v for j, v in x.items()) + rng.gauss(0, 0.2)
    rows.append(libsvm(round(y, 4), x))
write("regression.train", rows[:200])
write("regression.test", rows[200:])

# Binary classification.
wc = [0.0] * nf
for j, v in zip([1, 4, 9, 15, 22], [2.0, -2.0, 1.5, -1.5, 2.0]):
    wc[j] = v
rows = []
for _ in range(300):
    x = sparse_row(nf, 0.3)
    s = sum(wc[j] * v for j, v in x.items()) + rng.gauss(0, 0.3)
    rows.append(libsvm(1 if s > 0 else 0, x))
write("classes.train", rows[:200])
write("classes.test", rows[200:])

# Topics: topic k favours words 10k..10k+9.
words = ["alpha", "beta", "gamma", "delta", "omega", "sigma", "kappa", "theta", "zeta", "eta"]
vocab = [f"{topic}-{wd}" for topic in ["sea", "sky", "rock", "tree"] for wd in words]
write("vocab.txt", vocab)


def docword(n_docs):
    entries = []
    for d in range(n_docs):
        mix = [rng.random() ** 4 for _ in range(4)]
        total = sum(mix)
        counts = {}
        for _ in range(40):
            t = rng.choices(range(4), weights=[m / total for m in mix])[0]
            wd = 10 * t + rng.randrange(10) if rng.random() < 0.9 else rng.randrange(40)
            counts[wd] = counts.get(wd, 0) + 1
        entries += [f"{d + 1} {wd + 1} {c}" for wd, c in sorted(counts.items())]
    return [str(n_docs), "40", str(len(entries))] + entries


write("docs.train", docword(80))
write("docs.test", docword(20))
