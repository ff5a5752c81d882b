"""benchmarks/moe.py's --models/--tokens/--configs selection and its FP8 summary over whatever
tile configs a run forced (no GPU: the selection happens before anything is timed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from benchmark_modules import BENCHMARKS, import_benchmark

pytest.importorskip("torch")


@pytest.fixture(scope="module")
def moe() -> ModuleType:
    return import_benchmark("moe")


def test_models_and_tokens_narrow_a_regime(moe: ModuleType) -> None:
    chosen = moe.select_layers(moe.FP8_LAYERS, "mixtral, llama-4", "4096")
    assert [(layer.name, layer.tokens) for layer in chosen] == [
        ("mixtral", 4096),
        ("llama-4", 4096),
    ]
    decode = moe.select_layers(moe.DECODE_LAYERS, None, "1,64")
    assert {layer.tokens for layer in decode} == {1, 64}
    assert len(decode) == 2 * len(moe.MODELS)
    assert moe.select_layers(moe.LAYERS, None, None) == tuple(moe.LAYERS)


@pytest.mark.parametrize(
    ("models", "tokens", "names"),
    [
        ("mixtral,gpt4", None, ["--models", "'gpt4'", "llama-4"]),
        (None, "4097", ["--tokens", "'4097'", "16384"]),
        (None, "4k", ["--tokens", "'4k'"]),
        ("deepseek-v3", "16384", ["leave no layer"]),
    ],
)
def test_a_selection_that_names_nothing_is_refused_by_name(
    moe: ModuleType, models: str | None, tokens: str | None, names: list[str]
) -> None:
    with pytest.raises(moe.SelectionError) as caught:
        moe.select_layers(moe.LAYERS, models, tokens)
    for name in names:
        assert name in str(caught.value)


def test_configs_are_the_installed_package_s_and_auto_is_always_timed(moe: ModuleType) -> None:
    known = ("auto", "cooperative", "small", "gemv", "cooperative_2x1")
    assert moe.select_configs(None, moe.FORCED, known) == (
        "cooperative",
        "cooperative_2x1",
        "small",
        "gemv",
    )
    assert moe.select_configs("auto,small", moe.FORCED, known) == ("small",)
    # An empty list forces nothing, gemv neither: the run times auto alone against torch.
    assert moe.select_configs("", moe.FORCED, known) == ()
    assert moe.layer_configs((), 1) == ("auto",)
    with pytest.raises(moe.SelectionError, match="no config 'cooperative_2x1'"):
        moe.select_configs("cooperative_2x1", moe.FORCED, known[:4])


def test_gemv_only_at_decode_sizes(moe: ModuleType) -> None:
    forced = ("cooperative", "gemv")
    # By default decode sizes time gemv; a named list is kept as named; prefill never has it.
    default = ("auto", "cooperative", "cooperative_2x1", "small")
    assert moe.layer_configs(moe.FORCED, 8) == (*default, "gemv")
    assert moe.layer_configs(moe.FORCED, 4096) == default
    assert moe.layer_configs(("cooperative",), 8) == ("auto", "cooperative")
    assert moe.layer_configs(forced, 8) == ("auto", "cooperative", "gemv")
    assert moe.layer_configs(forced, 4096) == ("auto", "cooperative")


def _fp8_row(gemm: str, impl: str, ms: float) -> dict[str, Any]:
    return {"gemm": gemm, "impl": impl, "ms": ms}


def test_fp8_summary_counts_every_forced_config_and_the_best_of_them(moe: ModuleType) -> None:
    layer = {
        "label": "mixtral T=4k",
        "gemms": [
            _fp8_row("gate_up", "torch._scaled_grouped_mm rowwise", 1.2),
            _fp8_row("gate_up", "moe_ops rowwise", 1.0),
            _fp8_row("gate_up", "moe_ops rowwise[cooperative]", 1.0),
            _fp8_row("gate_up", "moe_ops rowwise[cooperative_2x1]", 0.8),
            _fp8_row("gate_up", "moe_ops blockwise", 0.5),
            _fp8_row("down", "torch._scaled_grouped_mm rowwise", 1.0),
            _fp8_row("down", "moe_ops rowwise", 0.5),
            _fp8_row("down", "moe_ops rowwise[cooperative]", 0.5),
            _fp8_row("down", "moe_ops rowwise[cooperative_2x1]", 0.625),
        ],
    }
    summary = moe.fp8_summary([layer])
    configs = summary["configs"]
    assert set(configs) == {"auto", "cooperative", "cooperative_2x1", "best"}
    assert configs["cooperative_2x1"]["per_gemm"] == {
        "mixtral T=4k|gate_up": pytest.approx(1.5),
        "mixtral T=4k|down": pytest.approx(1.6),
    }
    assert configs["best"]["per_gemm"] == {
        "mixtral T=4k|gate_up": pytest.approx(1.5),
        "mixtral T=4k|down": pytest.approx(2.0),
    }
    assert summary["min"] == pytest.approx(1.2)  # auto's, which the targets count


def test_the_command_refuses_a_bad_selection_in_one_line(tmp_path: Path) -> None:
    out = tmp_path / "moe.json"
    done = subprocess.run(
        [
            sys.executable,
            str(BENCHMARKS / "moe.py"),
            "--fp8",
            "--models",
            "gpt4",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "--models" in lines[0] and "'gpt4'" in lines[0], done.stderr
    assert "Traceback" not in done.stderr and not out.exists()


def test_rounds_rotate_every_implementation_through_every_position(moe: ModuleType) -> None:
    names = ["torch", "auto", "forced", "loop"]
    orders = [moe.rotation(names, r) for r in range(len(names))]
    for name in names:
        assert sorted(order.index(name) for order in orders) == [0, 1, 2, 3]
    assert moe.rotation(names, len(names)) == names
    # About BUDGET_MS of calls each, within the bounds.
    assert moe.rounds_for([6.0, 6.0]) == int(moe.BUDGET_MS * 2 / 12.0)
    assert moe.rounds_for([0.001] * 4) == moe.MAX_ROUNDS
    assert moe.rounds_for([100.0] * 4) == moe.MIN_ROUNDS


def test_interleaving_gives_one_kernel_one_time_wherever_it_stands(
    moe: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A GPU whose clocks depend on where a call stands in a round (hot in the middle) and
    # that slows in the second half of the run: "auto" and "forced" are the same kernel.
    kernel_ms = {"torch": 2.0, "auto": 1.0, "forced": 1.0, "loop": 3.0}
    hump = [1.0, 1.1, 1.1, 1.0]
    state = {"calls": 0}
    orders: list[list[str]] = []

    def timed_calls(order: list[tuple[str, Any]], flush: Any) -> list[tuple[str, float]]:
        orders.append([name for name, _ in order])
        state["calls"] += 1
        late = 1.2 if state["calls"] > 3 + 20 else 1.0  # the estimate's 3 rounds, then half
        return [(name, kernel_ms[name] * hump[i] * late) for i, (name, _) in enumerate(order)]

    monkeypatch.setattr(moe, "_flush", lambda: lambda: None)
    monkeypatch.setattr(moe, "_timed_calls", timed_calls)
    monkeypatch.setattr(moe, "rounds_for", lambda estimates: 40)
    timed = moe.bench_all({name: (lambda: None) for name in kernel_ms})
    assert timed["auto"] == timed["forced"]
    assert timed["torch"].ms / timed["auto"].ms == pytest.approx(2.0)
    # The second half of the rounds ran 20% slower: the halves' medians are 1.1 and 1.32 ms
    # (each half's calls half at 1.0x, half at 1.1x the kernel's time), the whole's 1.2.
    assert timed["auto"].ms == pytest.approx(1.2)
    assert timed["auto"].spread == pytest.approx(0.22 / 1.2)
    assert len(orders) == 3 + 40  # the estimate's rounds, then the timed ones
    assert {tuple(order) for order in orders[3:7]} == {
        tuple(moe.rotation(list(kernel_ms), r)) for r in range(4)
    }


def test_largest_spread_names_the_noisiest_row(moe: ModuleType) -> None:
    layers = [
        {
            "label": "mixtral T4096",
            "gemms": [
                {"gemm": "gate_up", "layout": "row-major", "impl": "x", "pass_spread": 0.01},
                {"gemm": "down", "layout": "transposed", "impl": "y", "pass_spread": 0.07},
            ],
            "forward": [{"layout": "row-major", "impl": "z", "pass_spread": 0.02}],
        },
        {"label": "fp8 refused", "gemms": [{"gemm": "down", "impl": "w", "refused": "no"}]},
    ]
    worst = moe.largest_spread(layers)
    assert worst == {"spread": 0.07, "impl": "y", "where": "mixtral T4096 down transposed"}
    assert "7.0%" in moe.spread_line(worst)
    assert moe.largest_spread(layers[1:]) is None
    assert moe.spread_line(None) == "no timed rows"
