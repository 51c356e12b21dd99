"""Makes a pair of real checkpoints: a small language model trained with
numpy (embedding, MLP blocks, tied output), saved after STEPS steps and
again after STEPS more, as safetensors. Training is real (cross-entropy on
Zipf-distributed token data, Adam), so the second checkpoint differs from
the first as a continued training run's would: every dense weight moves,
while embedding rows of tokens the later steps never saw keep their bytes.

usage: train_pair.py OUT_DIR [--vocab N] [--dim N] [--layers N] [--steps N] [--finetune-last]
"""
import argparse, json, os, struct, sys
import numpy as np

ap = argparse.ArgumentParser()
ap.add_argument("out")
ap.add_argument("--vocab", type=int, default=32768)
ap.add_argument("--dim", type=int, default=512)
ap.add_argument("--layers", type=int, default=4)
ap.add_argument("--steps", type=int, default=3)
ap.add_argument("--batch", type=int, default=2048)
ap.add_argument("--seed", type=int, default=1)
ap.add_argument("--finetune-last", action="store_true",
                help="second half: train only the last block (embeddings and other blocks frozen), as a partial fine-tune does")
args = ap.parse_args()

rng = np.random.default_rng(args.seed)
V, D, L = args.vocab, args.dim, args.layers
params = {"embed.weight": (rng.standard_normal((V, D)) * 0.02).astype(np.float32)}
for i in range(L):
    params[f"layers.{i}.up.weight"] = (rng.standard_normal((D, 4 * D)) / np.sqrt(D)).astype(np.float32)
    params[f"layers.{i}.down.weight"] = (rng.standard_normal((4 * D, D)) / np.sqrt(4 * D)).astype(np.float32)
    params[f"layers.{i}.norm.weight"] = np.ones(D, np.float32)
adam = {k: (np.zeros_like(v), np.zeros_like(v)) for k, v in params.items()}
t = 0

# Zipf-distributed tokens, as text is: frequent tokens every step, most of
# the vocabulary rarely or never.
ranks = np.arange(1, V + 1)
p = 1.0 / ranks ** 1.1
p /= p.sum()

phase = "pretrain"
def frozen(k):
    return phase == "finetune" and not k.startswith(f"layers.{L - 1}.")

def step():
    global t
    t += 1
    x_tok = rng.choice(V, size=args.batch, p=p)
    y_tok = rng.choice(V, size=args.batch, p=p)
    E = params["embed.weight"]
    h = E[x_tok]
    cache = []
    for i in range(L):
        n = params[f"layers.{i}.norm.weight"]
        hn = h * n
        u = hn @ params[f"layers.{i}.up.weight"]
        a = np.maximum(u, 0)
        d = a @ params[f"layers.{i}.down.weight"]
        cache.append((h, hn, u, a))
        h = h + d
    logits = h @ E.T
    logits -= logits.max(axis=1, keepdims=True)
    prob = np.exp(logits)
    prob /= prob.sum(axis=1, keepdims=True)
    loss = -np.log(prob[np.arange(args.batch), y_tok] + 1e-9).mean()
    g = prob
    g[np.arange(args.batch), y_tok] -= 1
    g /= args.batch
    grads = {k: np.zeros_like(v) for k, v in params.items()}
    # Tied output layer: only the rows of E the logits touch get gradient
    # through it in a sampled softmax; keep it sparse like a real sparse
    # embedding update: restrict to the tokens of this batch.
    seen = np.unique(np.concatenate([x_tok, y_tok]))
    gh = g[:, seen] @ E[seen]
    grads["embed.weight"][seen] += (g[:, seen].T @ h)
    for i in reversed(range(L)):
        h_in, hn, u, a = cache[i]
        gd = gh
        grads[f"layers.{i}.down.weight"] += a.T @ gd
        ga = gd @ params[f"layers.{i}.down.weight"].T
        gu = ga * (u > 0)
        grads[f"layers.{i}.up.weight"] += hn.T @ gu
        ghn = gu @ params[f"layers.{i}.up.weight"].T
        grads[f"layers.{i}.norm.weight"] += (ghn * h_in).sum(axis=0)
        gh = gh + ghn * params[f"layers.{i}.norm.weight"]
    np.add.at(grads["embed.weight"], x_tok, gh)
    lr, b1, b2 = 1e-3, 0.9, 0.999
    for k, v in params.items():
        if frozen(k):
            continue
        gk = grads[k]
        if k == "embed.weight":
            # Sparse Adam (as torch's SparseAdam): only rows with gradient move.
            rows = np.unique(np.concatenate([x_tok, seen]))
            m, s = adam[k]
            m[rows] = b1 * m[rows] + (1 - b1) * gk[rows]
            s[rows] = b2 * s[rows] + (1 - b2) * gk[rows] ** 2
            v[rows] -= lr * (m[rows] / (1 - b1 ** t)) / (np.sqrt(s[rows] / (1 - b2 ** t)) + 1e-8)
            continue
        m, s = adam[k]
        m *= b1; m += (1 - b1) * gk
        s *= b2; s += (1 - b2) * gk * gk
        v -= lr * (m / (1 - b1 ** t)) / (np.sqrt(s / (1 - b2 ** t)) + 1e-8)
    return loss

def save(path):
    # safetensors by hand (8-byte header length, JSON header, F32 data), so
    # only numpy is needed.
    header, offset, blobs = {}, 0, []
    for k in sorted(params):
        b = params[k].astype("<f4").tobytes()
        header[k] = {"dtype": "F32", "shape": list(params[k].shape), "data_offsets": [offset, offset + len(b)]}
        offset += len(b)
        blobs.append(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump({"vocab": V, "dim": D, "layers": L, "step": t}, f)

for _ in range(args.steps):
    loss = step()
save(os.path.join(args.out, "a"))
if args.finetune_last:
    phase = "finetune"
for _ in range(args.steps):
    loss = step()
save(os.path.join(args.out, "b"))
def rows_changed(path_a, path_b):
    """Bytes of the tensor rows (last axis) that differ at all: the least
    a delta at row granularity sends."""
    def load(path):
        raw = open(os.path.join(path, "model.safetensors"), "rb").read()
        n = struct.unpack("<Q", raw[:8])[0]
        head = json.loads(raw[8:8 + n])
        return {k: np.frombuffer(raw[8 + n + v["data_offsets"][0]: 8 + n + v["data_offsets"][1]], "<f4").reshape(v["shape"]) for k, v in head.items()}
    A, B = load(path_a), load(path_b)
    total = 0
    for k in A:
        a2, b2 = A[k].reshape(-1, A[k].shape[-1]), B[k].reshape(-1, B[k].shape[-1])
        total += int((a2 != b2).any(axis=1).sum()) * a2.shape[1] * 4
    return total
rows = rows_changed(os.path.join(args.out, "a"), os.path.join(args.out, "b"))
a = open(os.path.join(args.out, "a", "model.safetensors"), "rb").read()
b = open(os.path.join(args.out, "b", "model.safetensors"), "rb").read()
diff = np.frombuffer(a, np.uint8) != np.frombuffer(b, np.uint8)
E_bytes = V * D * 4
print(json.dumps({"bytes": len(b), "changed_bytes": int(diff.sum()), "loss": float(loss),
                  "changed_row_bytes": rows, "embedding_bytes": E_bytes}))
