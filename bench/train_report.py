"""The tables of a `bench/train_smollm2.sh` run (issue 19's report) from its folder or its train.tgz:
evaluations before and after training (pass rate, mean reward, turns, policy tokens), the RFT and
value stages, and PPO step by step (reward, KL, entropy, value loss, clip fraction, tool-call validity,
rollout tokens per second, environment steps per second, peak GPU memory).

    python bench/train_report.py /tmp/ks-train            # the run's folder
    python bench/train_report.py path/to/train.tgz        # as a device call brings it back
"""

from __future__ import annotations

import argparse
import json
import tarfile
import tempfile
from pathlib import Path

EVALS = (("held apart", "eval-before", "eval-after"), ("dev subset", "eval-dev-before", "eval-dev-after"))
PPO_COLUMNS = (("step", "step", "{}"), ("reward", "reward_mean", "{:+.3f}"), ("KL", "kl_to_reference", "{:.5f}"),
               ("entropy", "entropy", "{:.3f}"), ("value loss", "value_loss", "{:.4f}"),
               ("clip frac", "clip_fraction", "{:.3f}"), ("valid calls", "tool_call_validity", "{:.2f}"),
               ("resp. tokens", "response_length", "{:.0f}"), ("rollout tok/s", "rollout_tokens_per_s", "{:.1f}"),
               ("env steps/s", "env_steps_per_s", "{:.3f}"), ("train tok/s", "tokens_per_s", "{:.0f}"),
               ("GPU GB", "gpu_memory_gb", "{}"))


def jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


def eval_line(rows: list[dict]) -> str:
    """pass rate, mean reward, median turns and policy tokens per session of one evaluation's rows."""
    if not rows:
        return "not run | |"
    passed = sum(bool(r.get("correct")) for r in rows)
    reward = sum(float(r.get("reward") or 0.0) for r in rows) / len(rows)
    tokens = sorted(int((r.get("tokens") or {}).get("output", 0)) for r in rows)
    return f"{passed}/{len(rows)} | {reward:+.3f} | {tokens[len(tokens) // 2]}"


def eval_table(root: Path) -> list[str]:
    lines = ["| tasks | policy | correct | mean reward | policy tokens (median) |", "|---|---|---|---|---|"]
    for label, before, after in EVALS:
        lines.append(f"| {label} | base | {eval_line(jsonl(root / before / 'rows.jsonl'))} |")
        lines.append(f"| {label} | after PPO | {eval_line(jsonl(root / after / 'rows.jsonl'))} |")
    return lines


def ppo_table(root: Path) -> list[str]:
    rows = jsonl(root / "ppo" / "metrics.jsonl")
    lines = ["| " + " | ".join(c[0] for c in PPO_COLUMNS) + " |", "|" + "---|" * len(PPO_COLUMNS)]
    for row in rows:
        cells = [fmt.format(row[key]) if row.get(key) is not None else "" for _, key, fmt in PPO_COLUMNS]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def warmup_lines(root: Path) -> list[str]:
    lines = []
    rft = root / "rft" / "rft.json"
    if rft.is_file():
        summary = json.loads(rft.read_text())
        sft = jsonl(root / "rft" / "metrics.jsonl")
        losses = [r["loss"] for r in sft if "loss" in r]
        lines.append(f"- RFT: {summary.get('sessions')} teacher sessions, {summary.get('kept')} kept, rejected "
                     f"{summary.get('rejected')}; SFT loss {losses[0]:.3f} -> {losses[-1]:.3f}" if losses else
                     f"- RFT: {summary}")
    critic = jsonl(root / "critic" / "metrics.jsonl")
    if critic:
        lines.append(f"- value: {len(critic)} steps, value loss {critic[0]['value_loss']:.4f} -> "
                     f"{critic[-1]['value_loss']:.4f}, explained variance {critic[-1]['explained_variance']:.3f}"
                     + _throughput(critic))
    gpu = (root / "gpu.csv").read_text().strip().splitlines() if (root / "gpu.csv").is_file() else []
    if gpu:
        lines.append(f"- GPU (nvidia-smi at the end of the last call): {gpu[-1]}")
    return lines


def _throughput(steps: list[dict]) -> str:
    """', N tokens/s' over the steps (tokens the critic read over the seconds its steps took), where logged."""
    if not all(r.get("tokens") and r.get("tokens_per_s") for r in steps):
        return ""
    seconds = sum(r["tokens"] / r["tokens_per_s"] for r in steps)
    return f", {sum(r['tokens'] for r in steps) / seconds:,.0f} tokens/s ({seconds:.0f} s)"


def report(root: Path) -> str:
    return "\n".join(["## Evaluations", *eval_table(root), "", "## Warm-up", *warmup_lines(root), "",
                      "## PPO", *ppo_table(root)]) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="the run's folder (W) or its train.tgz")
    args = parser.parse_args()
    if args.run.is_dir():
        print(report(args.run), end="")
        return
    with tempfile.TemporaryDirectory() as tmp, tarfile.open(args.run) as tar:
        tar.extractall(tmp, filter="data")
        print(report(Path(tmp)), end="")


if __name__ == "__main__":
    main()
