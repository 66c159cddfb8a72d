"""braze/cli/bench/suite.py's output: the progress line per case, the table, the summary (geometric mean and
worst ratio of braze to each peer) and the plot of percent of copy bandwidth per fusion."""

from __future__ import annotations

import math
from pathlib import Path

LABELS = {"braze": "braze", "torch": "torch eager", "torch_compile": "torch.compile", "jax": "JAX",
          "numpy": "NumPy"}
RATIO_PEER = {"torch_compile", "numpy"}  # the peer the table's ratio column divides by


def gbps(row: dict, key: str) -> float | None:
    cell = row.get(key)
    return cell["gbps"] if cell and cell.get("status") == "ok" else None


def cell_text(row: dict, key: str) -> str:
    cell = row.get(key)
    if cell is None:
        return "-"
    return f"{cell['gbps']:.3g}" if cell["status"] == "ok" else cell["status"]


def progress(row: dict, keys: tuple[str, ...]) -> str:
    line = f"{row['case']:28} " + " ".join(f"{LABELS[k]}={cell_text(row, k)}" for k in keys if k in row)
    problem = row.get("braze", {}).get("error") or row.get("braze", {}).get("detail")
    return f"{line}  [braze: {problem}]" if problem else line


def ratio_summary(rows: list[dict], peer: str) -> dict | None:
    """Geometric mean and worst of braze GB/s / peer GB/s over the rows where both ran correctly."""
    ratios = [(gbps(r, "braze") / gbps(r, peer), r["case"]) for r in rows if gbps(r, "braze") and gbps(r, peer)]
    if not ratios:
        return None
    worst = min(ratios)
    return {"geomean": math.exp(sum(math.log(x) for x, _ in ratios) / len(ratios)), "worst": worst[0],
            "worst_case": worst[1], "cases": len(ratios)}


def summary(rows: list[dict], peers: tuple[str, ...]) -> dict:
    failing = {s: [r["case"] for r in rows if r.get("braze", {}).get("status") == s] for s in ("WRONG", "FAIL")}
    return {"vs": {p: ratio_summary(rows, p) for p in peers}, "braze_wrong": failing["WRONG"],
            "braze_fail": failing["FAIL"]}


def table(result: dict, peers: tuple[str, ...]) -> str:
    copy, rows = result["copy_gbps"], result["rows"]
    ratio_peer = next(p for p in peers if p in RATIO_PEER)
    names = ["braze", "%copy", *(LABELS[p] for p in peers), f"/{LABELS[ratio_peer]}"]
    lines = [f"\nbraze on {result['device']} ({result['mode']} shapes): GB/s = bytes that must cross memory / "
             f"median time; copy {copy:.0f} GB/s in the same run",
             f"{'fusion':40} {'dtype':9} {'shape':20} " + " ".join(f"{n:>14}" for n in names)]
    for r in rows:
        braze = gbps(r, "braze")
        other = gbps(r, ratio_peer)
        cells = [cell_text(r, "braze"), f"{100 * braze / copy:.0f}%" if braze else "-",
                 *(cell_text(r, p) for p in peers), f"{braze / other:.2f}" if braze and other else "-"]
        shape = "x".join(map(str, r["shape"]))
        lines.append(f"{r['fusion'][:40]:40} {r['dtype']:9} {shape:20} " + " ".join(f"{c:>14}" for c in cells))
    lines += [f"  {r['case']}: {LABELS[k]} {r[k]['status']}: {r[k]['error']}" for r in rows
              for k in ("braze", *peers) if k in r and r[k]["status"] != "ok"]
    for peer, s in result["summary"]["vs"].items():
        if s:
            lines.append(f"braze / {LABELS[peer]}: geometric mean {s['geomean']:.2f}, worst {s['worst']:.2f} "
                         f"({s['worst_case']}), over {s['cases']} fusions")
    return "\n".join(lines)


def plot(result: dict, peers: tuple[str, ...], path: Path) -> str:
    """A PNG of percent of copy bandwidth per fusion, braze beside the peers; a note where it cannot."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "no plot: matplotlib is not installed"
    rows, keys = result["rows"], ("braze", *peers)
    height = 0.8 / len(keys)
    fig, ax = plt.subplots(figsize=(10, 0.45 * len(rows) + 1.5))
    for i, key in enumerate(keys):
        values = [100 * (gbps(r, key) or 0) / result["copy_gbps"] for r in rows]
        ax.barh([y + i * height for y in range(len(rows))], values, height, label=LABELS[key])
    ax.set_yticks([y + 0.4 - height / 2 for y in range(len(rows))])
    ax.set_yticklabels([f"{r['fusion']} {r['dtype']}" for r in rows], fontsize=7)
    ax.invert_yaxis()
    ax.axvline(100, color="grey", linewidth=0.8)
    ax.set_xlabel(f"% of copy bandwidth ({result['copy_gbps']:.0f} GB/s); missing bar: wrong, failed or not run")
    ax.set_title(f"braze fusion suite on {result['device']}")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return f"wrote {path}"
