"""The RL-rollout stand-in task for bench/rollouts.ts, run inside a sandbox (python3 + git only,
no network). Three subcommands:

  setup   --root DIR --files F --commits C --min-seconds S
          generates a deterministic python project of F modules, commits it C times in git,
          byte-compiles it, builds a token index and analysis state, then repeats the analysis
          passes until at least S seconds have passed (the knob that makes setup "expensive")
  hash    --root DIR    one sha256 over every file under DIR (path and bytes), sorted
  rollout --root DIR --seed N --out FILE
          reads the prepared state, edits a few files chosen by the seed, commits on a branch,
          byte-compiles and imports what it changed, and writes a result that differs per seed

Everything is seeded, and git dates are fixed, so the same parameters give the same project.
"""

import argparse
import compileall
import hashlib
import importlib
import json
import os
import random
import subprocess
import sys
import time

WORDS = [w.strip() for w in """alpha beta gamma delta epsilon zeta theta kappa lambda sigma omega
    parse render buffer cache index token graph node edge queue stack frame batch shard chunk
    reduce filter merge split score rank reward policy value state action episode step trace
    """.split()]

GIT_ENV = {
    "GIT_AUTHOR_NAME": "bench",
    "GIT_AUTHOR_EMAIL": "bench@aenv.invalid",
    "GIT_COMMITTER_NAME": "bench",
    "GIT_COMMITTER_EMAIL": "bench@aenv.invalid",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
    "GIT_CONFIG_NOSYSTEM": "1",
    "HOME": "/tmp",
}


def git(repo, *args, capture=False):
    env = {**os.environ, **GIT_ENV}
    r = subprocess.run(["git", "-C", repo, *args], env=env, check=True, capture_output=True, text=True)
    return r.stdout if capture else None


def module_source(rng, pkg, i):
    lines = [f'"""{pkg}.mod_{i:04d}: {" ".join(rng.choice(WORDS) for _ in range(8))}."""', ""]
    for f in range(rng.randint(3, 8)):
        name = f"{rng.choice(WORDS)}_{rng.choice(WORDS)}_{f}"
        a, b = rng.randint(1, 97), rng.randint(1, 97)
        lines += [
            f"def {name}(x, y={a}):",
            f'    """{" ".join(rng.choice(WORDS) for _ in range(12))}."""',
            f"    total = 0",
            f"    for k in range({b}):",
            f"        total += (x * k + y) % {a + b}",
            f"    return total",
            "",
        ]
    return "\n".join(lines) + "\n"


def paths(root, files):
    out = []
    for i in range(files):
        pkg = f"pkg_{i % 40:02d}"
        out.append((pkg, i, os.path.join(root, "repo", pkg, f"mod_{i:04d}.py")))
    return out


def tokens(text):
    word = []
    for ch in text:
        if ch.isalnum() or ch == "_":
            word.append(ch)
        elif word:
            yield "".join(word)
            word = []
    if word:
        yield "".join(word)


def analysis_pass(root, files):
    """Reads every module, tokenizes it, and folds git history in: the state later rollouts read."""
    index = {}
    sizes = {}
    for _, i, p in paths(root, files):
        with open(p, encoding="utf-8") as f:
            text = f.read()
        sizes[i] = len(text)
        for t in set(tokens(text)):
            if len(t) > 3 and not t.isdigit():
                index.setdefault(t, []).append(i)
    churn = {}
    for line in git(os.path.join(root, "repo"), "log", "--numstat", "--format=", capture=True).splitlines():
        parts = line.split("\t")
        if len(parts) == 3:
            churn[parts[2]] = churn.get(parts[2], 0) + int(parts[0]) + int(parts[1])
    return index, sizes, churn


def setup(a):
    t0 = time.monotonic()
    phases = {}

    def mark(name):
        phases[name] = round(time.monotonic() - t0 - sum(phases.values()), 2)

    rng = random.Random(20260101)
    repo = os.path.join(a.root, "repo")
    for pkg in {p for p, _, _ in paths(a.root, a.files)}:
        os.makedirs(os.path.join(repo, pkg), exist_ok=True)
        with open(os.path.join(repo, pkg, "__init__.py"), "w", encoding="utf-8") as f:
            f.write("")
    all_paths = paths(a.root, a.files)
    for pkg, i, p in all_paths:
        with open(p, "w", encoding="utf-8") as f:
            f.write(module_source(rng, pkg, i))
    with open(os.path.join(repo, ".gitignore"), "w", encoding="utf-8") as f:
        f.write("__pycache__/\n")
    mark("generate")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "initial import")
    # History: each commit rewrites a few modules, as a project's log would.
    for c in range(a.commits):
        touched = rng.sample(all_paths, min(5, len(all_paths)))
        for pkg, i, p in touched:
            with open(p, "a", encoding="utf-8") as f:
                f.write(f"\n# change {c}: {' '.join(rng.choice(WORDS) for _ in range(6))}\n")
        git(repo, "add", "--", *(p for _, _, p in touched))
        git(repo, "commit", "-q", "-m", f"change {c}")
    git(repo, "gc", "-q")
    mark("git")
    compileall.compile_dir(repo, quiet=1, force=True)
    mark("compile")
    passes = 0
    while True:
        index, sizes, churn = analysis_pass(a.root, a.files)
        passes += 1
        if time.monotonic() - t0 >= a.min_seconds:
            break
    mark("analysis")
    with open(os.path.join(a.root, "index.json"), "w", encoding="utf-8") as f:
        json.dump(index, f, sort_keys=True)
    with open(os.path.join(a.root, "state.json"), "w", encoding="utf-8") as f:
        json.dump({"files": a.files, "commits": a.commits, "sizes": sizes, "churn": churn}, f, sort_keys=True)
    # Outside the hashed tree: how much repeating it took depends on the machine.
    mark("write")
    print(json.dumps({"seconds": round(time.monotonic() - t0, 2), "passes": passes, "phases": phases}))


def tree_hash(root):
    h = hashlib.sha256()
    n = 0
    for d, dirs, names in os.walk(root):
        dirs.sort()
        for name in sorted(names):
            p = os.path.join(d, name)
            if os.path.islink(p) or not os.path.isfile(p):
                continue
            h.update(os.path.relpath(p, root).encode() + b"\0")
            with open(p, "rb") as f:
                h.update(hashlib.sha256(f.read()).digest())
            n += 1
    return h.hexdigest(), n


def rollout(a):
    t0 = time.monotonic()
    rng = random.Random(a.seed)
    repo = os.path.join(a.root, "repo")
    with open(os.path.join(a.root, "index.json"), encoding="utf-8") as f:
        index = json.load(f)
    with open(os.path.join(a.root, "state.json"), encoding="utf-8") as f:
        state = json.load(f)
    terms = sorted(index)
    query = rng.sample(terms, 3)
    hits = sorted({i for t in query for i in index[t]})
    targets = rng.sample(hits, min(3, len(hits))) if hits else [rng.randrange(state["files"])]
    # Reads the whole prepared tree once, as an agent's first search would.
    grep = subprocess.run(["git", "-C", repo, "grep", "-c", "-w", query[0]], capture_output=True, text=True).stdout
    git(repo, "checkout", "-q", "-b", f"rollout-{a.seed}")
    changed = []
    for i in targets:
        pkg = f"pkg_{i % 40:02d}"
        p = os.path.join(repo, pkg, f"mod_{i:04d}.py")
        with open(p, "a", encoding="utf-8") as f:
            f.write(f"\n\ndef rollout_{a.seed}(x):\n    return x * {rng.randint(2, 999)} + {rng.randint(0, 999)}\n")
        changed.append((pkg, i, p))
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", f"rollout {a.seed}")
    diff = git(repo, "diff", "HEAD~1", capture=True)
    # The "test": byte-compile and import what changed, then call the new function.
    sys.path.insert(0, repo)
    reward = 0
    for pkg, i, p in changed:
        compileall.compile_file(p, quiet=1, force=True)
        mod = importlib.import_module(f"{pkg}.mod_{i:04d}")
        reward += getattr(mod, f"rollout_{a.seed}")(state["sizes"][str(i)])
    result = {
        "seed": a.seed,
        "query": query,
        "grepFiles": len(grep.splitlines()),
        "changed": [i for _, i, _ in changed],
        "commit": git(repo, "rev-parse", "HEAD", capture=True).strip(),
        "diffSha256": hashlib.sha256(diff.encode()).hexdigest(),
        "reward": reward,
        "seconds": round(time.monotonic() - t0, 3),
    }
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump(result, f, sort_keys=True)
    print(json.dumps(result))


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("setup")
    s.add_argument("--root", required=True)
    s.add_argument("--files", type=int, default=2000)
    s.add_argument("--commits", type=int, default=50)
    s.add_argument("--min-seconds", type=float, default=20)
    h = sub.add_parser("hash")
    h.add_argument("--root", required=True)
    r = sub.add_parser("rollout")
    r.add_argument("--root", required=True)
    r.add_argument("--seed", type=int, required=True)
    r.add_argument("--out", required=True)
    a = ap.parse_args()
    if a.cmd == "setup":
        setup(a)
    elif a.cmd == "hash":
        digest, n = tree_hash(a.root)
        print(json.dumps({"sha256": digest, "files": n}))
    else:
        rollout(a)


if __name__ == "__main__":
    main()
