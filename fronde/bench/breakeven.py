# pyright: reportUnknownMemberType=false
# (matplotlib's bundled annotations leave **kwargs untyped on Axes and Figure methods)
"""Break-even maps: where speculation pays on a given machine.

**Verify cost**: ``llama-bench -p k -n 0`` times a target batch of k tokens at a
context depth; ``r(k) = T(k) ÷ T(1)`` is the cost of verifying k − 1 drafts in decode
steps. **Expected speedup** (Leviathan, Kalman and Matias, *Fast Inference from
Transformers via Speculative Decoding*, ICML 2023, Theorem 3.8, Eq. 1): with an i.i.d.
per-token acceptance β and γ drafts a step, ``E = (1 − β^(γ+1)) ÷ (1 − β)`` tokens a
step and ``S(β, γ) = E ÷ (r(γ + 1) + γ·c)``, c a draft token's cost in target steps.
llama.cpp reports α = accepted ÷ drafted, ``α(β, γ) = β(1 − β^γ) ÷ ((1 − β)γ)`` under
the same model; the maps plot S against that α, where measured points lie.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

import numpy as np

from fronde.errors import FrondeError
from fronde.serving import ServedCostFit

__all__ = [
    "ServedCost", "VerifyCosts", "acceptance_rate", "break_even_alpha", "expected_tokens",
    "measure_verify_costs", "served_cost", "served_costs_by", "speedup",
    "write_break_even_map",
]  # fmt: skip

K = TypeVar("K")


@dataclass(frozen=True)
class VerifyCosts:
    """Measured time of one target forward pass over a batch of k tokens.

    ``seconds[i]`` (and ``stddev_s[i]`` over llama-bench's repetitions) is a batch of
    ``ks[i]`` tokens after ``depth`` context tokens; ``machine`` and ``command`` say
    where and how it was measured.
    """

    ks: tuple[int, ...]
    seconds: tuple[float, ...]
    stddev_s: tuple[float, ...]
    depth: int
    machine: str
    command: str

    def ratio(self, k: int) -> float:
        """``r(k) = T(k) ÷ T(1)``: verifying k tokens in decode steps.

        Raises:
            KeyError: k or 1 was not measured.
        """
        by_k = dict(zip(self.ks, self.seconds, strict=True))
        return by_k[k] / by_k[1]

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict, the fields by name (see :meth:`from_json`)."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> VerifyCosts:
        """Rebuild from :meth:`to_json`'s dict (KeyError, TypeError, ValueError if not one)."""
        ks, seconds, stddev = (tuple(data[k]) for k in ("ks", "seconds", "stddev_s"))
        return cls(
            tuple(map(int, ks)), tuple(map(float, seconds)), tuple(map(float, stddev)),
            int(data["depth"]), str(data["machine"]), str(data["command"]),
        )  # fmt: skip


def measure_verify_costs(
    llama_bench: Path,
    model: Path,
    *,
    ks: Sequence[int] = tuple(range(1, 65)),
    depth: int = 256,
    reps: int = 3,
    threads: int | None = None,
    n_gpu_layers: int | None = None,
    machine: str = "",
    timeout_s: float = 1800.0,
) -> VerifyCosts:
    """Time a target batch of k tokens for every k in ``ks`` (which holds 1) with llama-bench.

    One ``llama-bench -m MODEL -p k1,k2,… -n 0 -d DEPTH -r REPS -o json`` run (``-t``
    ``threads``, ``-ngl`` ``n_gpu_layers`` when given); its ``avg_ns`` per test is the
    batch time, the ``depth`` tokens decoded untimed first. ``timeout_s``: the whole run.

    Raises:
        ValueError: ``ks`` lacks 1.
        FrondeError: llama-bench failed, timed out, or printed no usable JSON.
    """
    if 1 not in ks:
        raise ValueError("ks must contain 1 (one decode step is the unit)")
    argv = [str(llama_bench), "-m", str(model), "-p", ",".join(str(k) for k in ks), "-n", "0"]
    argv += ["-d", str(depth), "-r", str(reps), "-o", "json"]
    if threads is not None:
        argv += ["-t", str(threads)]
    if n_gpu_layers is not None:
        argv += ["-ngl", str(n_gpu_layers)]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired as exc:
        raise FrondeError(f"llama-bench ran past {timeout_s:.0f} s") from exc
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise FrondeError(f"llama-bench exited with {done.returncode}: {' | '.join(tail)}")
    try:
        rows: list[dict[str, Any]] = json.loads(done.stdout)
        by_k = {int(r["n_prompt"]): r for r in rows if int(r.get("n_gen", 0)) == 0}
        measured = [k for k in ks if k in by_k]
        seconds = tuple(float(by_k[k]["avg_ns"]) / 1e9 for k in measured)
        stddev = tuple(float(by_k[k]["stddev_ns"]) / 1e9 for k in measured)
    except (ValueError, KeyError, TypeError) as exc:
        raise FrondeError(f"llama-bench printed no usable JSON: {exc}") from exc
    if 1 not in measured:
        raise FrondeError("llama-bench gave no result for a batch of 1 token")
    return VerifyCosts(tuple(measured), seconds, stddev, depth, machine, " ".join(argv))


@dataclass(frozen=True)
class ServedCost:
    """The verify cost as a llama-server pays it, fitted from the requests it served.

    ``decode_ms ≈ pass_ms × passes + drafted_ms × drafted`` (passes = tokens − accepted),
    least squares without an intercept. Unlike :func:`measure_verify_costs` it counts
    what the server does per drafted position besides the forward pass: on the H200
    (gemma-3) llama-bench said 0.025 of a pass a drafted token, the servers paid
    0.27–0.45 (``results/load-gpu-h200-cpu-gemma-270m-20261203-bs``, c = 1).
    """

    pass_ms: float
    drafted_ms: float
    requests: int
    drafted: int

    @property
    def draft_cost(self) -> float:
        """``drafted_ms ÷ pass_ms``: a drafted token in passes (``router.draft_cost``'s unit)."""
        return self.drafted_ms / self.pass_ms


def served_cost(timings: Sequence[dict[str, Any]], min_requests: int = 8) -> ServedCost | None:
    """Fit :class:`ServedCost` to one server's requests' ``timings`` objects.

    The fit is :class:`~fronde.evidence.served_cost.ServedCostFit`'s, the one the router
    keeps per mode. None with fewer than ``min_requests`` requests, no drafted token, or a
    fit that is not positive (passes and drafts in one fixed proportion).
    """
    fit = ServedCostFit()
    for t in timings:
        if t.get("predicted_n") and t.get("predicted_ms"):
            passes = float(t["predicted_n"] - (t.get("draft_n_accepted") or 0))
            fit.add(passes, float(t.get("draft_n") or 0), float(t["predicted_ms"]))
    fitted = fit.fit() if fit.requests >= min_requests else None
    if fitted is None:
        return None
    return ServedCost(fitted[0], fitted[1], fit.requests, fit.drafted)


def served_costs_by(
    samples: Iterable[dict[str, Any]], key: Callable[[dict[str, Any]], K | None]
) -> dict[K, ServedCost]:
    """:func:`served_cost` of each group of samples, grouped by ``key`` (None: left out).

    A sample without a ``timings`` object is left out, and so is a group too small or
    without drafts to fit.
    """
    groups: dict[K, list[dict[str, Any]]] = {}
    for s in samples:
        k, t = key(s), s.get("timings")
        if k is not None and isinstance(t, dict):
            groups.setdefault(k, []).append(cast(dict[str, Any], t))
    fits = {k: served_cost(ts) for k, ts in groups.items()}
    return {k: fit for k, fit in fits.items() if fit is not None}


def expected_tokens(beta: np.ndarray | float, gamma: int) -> np.ndarray:
    """Tokens per speculative step, ``(1 − β^(γ+1)) ÷ (1 − β)`` (Leviathan et al. 2023, Eq. 1).

    ``beta`` in [0, 1) (array or scalar), ``gamma`` ≥ 1 drafted tokens per step.
    """
    b = np.clip(np.asarray(beta, dtype=float), 0.0, 1.0 - 1e-9)
    return (1.0 - b ** (gamma + 1)) / (1.0 - b)


def acceptance_rate(beta: np.ndarray | float, gamma: int) -> np.ndarray:
    """llama.cpp's α = accepted ÷ drafted under the i.i.d. model: ``β(1 − β^γ) ÷ ((1 − β)γ)``."""
    return (expected_tokens(beta, gamma) - 1.0) / gamma


def speedup(
    beta: np.ndarray | float, gamma: int, costs: VerifyCosts, draft_cost: float = 0.0
) -> np.ndarray:
    """Expected decode speedup over plain decoding, ``E ÷ (r(γ+1) + γ·c)``.

    Leviathan et al. 2023, Theorem 3.8, the verify of γ + 1 tokens costing the measured
    ``r(γ + 1)`` steps; c = ``draft_cost``, a drafted token in steps (0 for n-gram).

    Raises:
        KeyError: γ + 1 was not measured.
    """
    return expected_tokens(beta, gamma) / (costs.ratio(gamma + 1) + gamma * draft_cost)


def break_even_alpha(costs: VerifyCosts, gamma: int, draft_cost: float = 0.0) -> float | None:
    """The smallest α (accepted ÷ drafted) at which drafting γ tokens pays, S ≥ 1.

    Returns 0.0 when even β = 0 pays (a verify cheaper than a decode step, as seen
    on a GPU), None when no β < 1 does.

    Raises:
        KeyError: γ + 1 was not measured.
    """
    betas = 1.0 - np.geomspace(1.0, 1e-6, 4000)
    s = speedup(betas, gamma, costs, draft_cost)
    paying = np.nonzero(s >= 1.0)[0]
    if paying.size == 0:
        return None
    return float(acceptance_rate(betas[paying[0]], gamma))


def write_break_even_map(
    costs: VerifyCosts,
    points: Sequence[tuple[float, float, str]],
    path: Path,
    title: str,
    gammas: Sequence[int] = (1, 2, 4, 8, 16, 32),
) -> Path:
    """Draw the break-even map into ``path`` (PNG) and return ``path``.

    Left: the expected speedup over α and γ with the contour S = 1. Right: S against α
    for each of ``gammas``, the measured ``points`` (α, speedup, label) on top.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    betas = 1.0 - np.geomspace(1.0, 1e-6, 600)  # dense near β = 1, where α → 1
    max_gamma = max(k for k in costs.ks) - 1
    gamma_axis = [g for g in range(1, max_gamma + 1) if g + 1 in costs.ks]
    alpha_grid = np.linspace(0.0, 1.0, 201)
    heat = np.full((len(gamma_axis), alpha_grid.size), np.nan)
    for i, g in enumerate(gamma_axis):
        a = acceptance_rate(betas, g)
        s = speedup(betas, g, costs)
        heat[i] = np.interp(alpha_grid, a, s, left=np.nan, right=np.nan)

    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5))
    mesh = left.pcolormesh(
        alpha_grid, gamma_axis, heat, shading="nearest", cmap="RdYlGn", vmin=0.0, vmax=3.0
    )
    fig.colorbar(mesh, ax=left, label="expected decode speedup (× plain)")
    left.contour(alpha_grid, gamma_axis, heat, levels=[1.0], colors="black", linewidths=1.5)
    left.set_xlabel("α = accepted ÷ drafted")
    left.set_ylabel("γ, drafted tokens per step")
    left.set_title("Expected speedup; black line: break-even (S = 1)")

    for g in gammas:
        if g + 1 not in costs.ks:
            continue
        right.plot(acceptance_rate(betas, g), speedup(betas, g, costs), label=f"model γ = {g}")
    labels = sorted({p[2] for p in points})
    for label, marker in zip(labels, "os^Dv<>", strict=False):
        xs = [p[0] for p in points if p[2] == label]
        ys = [p[1] for p in points if p[2] == label]
        right.scatter(xs, ys, marker=marker, s=28, edgecolors="black", label=f"measured {label}")
    right.axhline(1.0, color="black", linewidth=1)
    right.set_xlim(0, 1)
    right.set_ylim(0, max(3.0, max((p[1] for p in points), default=0.0) * 1.1))
    right.set_xlabel("α = accepted ÷ drafted")
    right.set_ylabel("decode speedup (× plain)")
    right.set_title("Model (a draft of γ every step, c = 0) and measured prompts")
    right.legend(fontsize=7, ncol=2)
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
