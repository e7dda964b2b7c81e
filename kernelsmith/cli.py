"""Thin typer commands: parse, build options, call one function, map errors to exit codes.

Exit codes: 0 success (correct and clean), 1 rejected, 2 bad input, 3 internal error.
"""

from __future__ import annotations

import errno
import json
import sys
from pathlib import Path
from typing import List, Optional

import typer

from kernelsmith.errors import BadInput, KernelsmithError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Turn PyTorch modules into fast, verified CUDA kernels.")
STATE = {"debug": False}

DeviceOpt = typer.Option(None, "--device", help="cuda or cpu (default: cuda when a GPU is present)")
PrecisionOpt = typer.Option(None, "--precision", help="fp32 (default), tf32, bf16 or fp16; baselines use it too")
JsonOpt = typer.Option(False, "--json", help="print one JSON object instead of tables")


@app.callback()
def _root(debug: bool = typer.Option(False, "--debug", help="show tracebacks (accepted anywhere)")) -> None:
    STATE["debug"] = STATE["debug"] or debug


def default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _check_choice(value: str, choices, flag: str) -> str:
    if value not in choices:
        raise BadInput(f"unknown {flag} {value!r}", f"choose one of: {', '.join(choices)}")
    return value


def _options(device, precision, trials=5, profile=True, **extra):
    from kernelsmith.evaluation.options import EvalOptions
    from kernelsmith.evaluation.result import PRECISIONS

    device = _check_choice(device or default_device(), ("cuda", "cpu"), "--device")
    if device == "cuda" and default_device() != "cuda":
        raise BadInput("--device cuda but no CUDA GPU is visible to torch", "run `kernelsmith doctor`, or use --device cpu")
    if trials < 1:
        raise BadInput("--trials must be at least 1")
    return EvalOptions(device=device, precision=_check_choice(precision or "fp32", PRECISIONS, "--precision"),
                       trials=trials, profile=profile, **extra)


@app.command()
def init(task: str = typer.Argument(..., help="KernelBench-format file, or FILE:CLASS"),
         workdir: Path = typer.Option(..., "--workdir", "-w", help="new folder to create"),
         device: Optional[str] = DeviceOpt, precision: Optional[str] = PrecisionOpt,
         inputs: List[str] = typer.Option([], "--input", help="input spec for FILE:CLASS, e.g. 'float32[8,1024]'"),
         init_args: Optional[str] = typer.Option(None, "--init-args", help="constructor args, e.g. '[1024, 0.5]'"),
         check: bool = typer.Option(True, "--check/--no-check", help="run and lint the reference first")) -> None:
    """Lay out a workdir (reference, candidate, kernels/, SKILL.md) as a git repo."""
    from kernelsmith import task as task_mod
    from kernelsmith import workdir as wd
    from kernelsmith.console import console

    source = task_mod.load_task(task, inputs, init_args)
    opts = _options(device, precision)
    config = wd.create(source, workdir, opts.device, opts.precision)
    _start_ledger(workdir)
    console.print(f"[green]created[/] {workdir} for [bold]{config.task}[/] ({config.device}, {config.precision})")
    if check:
        _report_lint(task_mod.check_task(workdir / "model.py", opts.device, opts.precision))
    console.print(f"next: edit {workdir}/model_new.py and {workdir}/kernels/, then `kernelsmith verify {workdir}`")


def _start_ledger(workdir: Path) -> None:
    """A new workdir's ledger of kernel commits starts now, before any agent has run in it."""
    from kernelsmith.gitops import KernelRepo

    KernelRepo(workdir).start_ledger()


def _report_lint(report: dict) -> None:
    from kernelsmith.console import console

    shapes = ", ".join(f"{i.get('dtype', '')}{i.get('shape', i.get('value'))}" for i in report["inputs"])
    console.print(f"reference runs: inputs {shapes} -> outputs "
                  + ", ".join(f"{o['dtype']}{o['shape']}" for o in report["outputs"]))
    for warning in report["warnings"]:
        console.print(f"[yellow]warning:[/] degenerate task: {warning}")


@app.command("check")
def check_cmd(task: str = typer.Argument(..., help="KernelBench-format file, or FILE:CLASS"),
              device: Optional[str] = DeviceOpt, precision: Optional[str] = PrecisionOpt,
              inputs: List[str] = typer.Option([], "--input"), init_args: Optional[str] = typer.Option(None),
              as_json: bool = JsonOpt) -> None:
    """Run a task's reference and warn when it is degenerate."""
    import tempfile

    from kernelsmith import task as task_mod

    source = task_mod.load_task(task, inputs, init_args)
    opts = _options(device, precision)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model.py"
        path.write_text(source.source)
        report = task_mod.check_task(path, opts.device, opts.precision)
    if as_json:
        print(json.dumps(report))
    else:
        _report_lint(report)


def _workdir(path: Optional[Path]):
    from kernelsmith.workdir import WorkdirConfig

    workdir = (path or Path.cwd()).resolve()
    return workdir, WorkdirConfig.load(workdir)


@app.command("compile")
def compile_cmd(workdir: Optional[Path] = typer.Argument(None, help="workdir (default: .)"),
                fast_math: bool = typer.Option(False, "--fast-math", help="allow --use_fast_math / -ffast-math"),
                as_json: bool = JsonOpt) -> None:
    """Build kernels/ (incremental; unchanged sources are a cache hit)."""
    from kernelsmith.console import console
    from kernelsmith.evaluation.evaluate import run_build
    from kernelsmith.lock import workdir_lock

    path, config = _workdir(workdir)
    with workdir_lock(path, "kernelsmith compile"):
        built = run_build(path / "kernels", config.device, fast_math)
    if as_json:
        print(json.dumps({k: v for k, v in built.items() if k != "log"}))
    elif built["ok"]:
        console.print(f"[green]built[/] {'(cache hit) ' if built['cached'] else ''}in {built['seconds']:.1f} s")
    else:
        console.print(f"[red]build failed[/]\n{built['summary']}")
    raise typer.Exit(0 if built["ok"] else 1)


def _evaluate_workdir(workdir: Optional[Path], profile: bool, **opts_kw):
    from kernelsmith.evaluation.evaluate import evaluate_workdir
    from kernelsmith.lock import workdir_lock

    path, config = _workdir(workdir)
    opts_kw["device"] = opts_kw.get("device") or config.device
    opts_kw["precision"] = opts_kw.get("precision") or config.precision
    opts = _options(profile=profile, **opts_kw)
    with workdir_lock(path, f"kernelsmith {'profile' if profile else 'verify'}"):  # builds and caches write the workdir
        return evaluate_workdir(path, opts)


def _emit(result, as_json: bool, title: str) -> None:
    from kernelsmith.console import render_eval

    if as_json:
        print(result.to_json())
    else:
        render_eval(result, title)
    raise typer.Exit(0 if result.clean else 1)


@app.command()
def verify(workdir: Optional[Path] = typer.Argument(None, help="workdir (default: .)"),
           device: Optional[str] = DeviceOpt, precision: Optional[str] = PrecisionOpt,
           trials: int = typer.Option(5, "--trials", help="correctness trials (fresh inputs and weights each)"),
           as_json: bool = JsonOpt) -> None:
    """Build, then check model_new.py against model.py (no timing)."""
    result = _evaluate_workdir(workdir, profile=False, device=device, precision=precision, trials=trials)
    _emit(result, as_json, "verify")


@app.command()
def profile(workdir: Optional[Path] = typer.Argument(None, help="workdir (default: .)"),
            device: Optional[str] = DeviceOpt, precision: Optional[str] = PrecisionOpt,
            min_runs: int = typer.Option(100, "--min-runs"), min_seconds: float = typer.Option(1.0, "--min-seconds"),
            compile_baseline: Optional[bool] = typer.Option(None, "--compile/--no-compile",
                                                             help="time torch.compile too (default: on for CUDA)"),
            as_json: bool = JsonOpt) -> None:
    """Verify, then time the candidate against eager and torch.compile."""
    result = _evaluate_workdir(workdir, profile=True, device=device, precision=precision, min_runs=min_runs,
                               min_seconds=min_seconds, compile_baseline=compile_baseline)
    _emit(result, as_json, "profile")


@app.command("eval")
def eval_cmd(reference: Path = typer.Argument(..., help="KernelBench-format reference (defines Model)"),
             candidate: Path = typer.Argument(..., help="file that defines ModelNew"),
             device: Optional[str] = DeviceOpt, precision: Optional[str] = PrecisionOpt,
             trials: int = typer.Option(5, "--trials"), no_profile: bool = typer.Option(False, "--no-profile"),
             min_runs: int = typer.Option(100, "--min-runs"), min_seconds: float = typer.Option(1.0, "--min-seconds"),
             compile_baseline: Optional[bool] = typer.Option(None, "--compile/--no-compile"),
             timeout: float = typer.Option(300.0, "--timeout", help="seconds per candidate job"),
             as_json: bool = JsonOpt) -> None:
    """Score any ModelNew file against a reference with the kernelsmith harness."""
    from kernelsmith.evaluation.evaluate import evaluate
    from kernelsmith.task import load_task

    for path in (reference, candidate):
        if not path.is_file():
            raise BadInput(f"file not found: {path}")
    load_task(str(reference))  # a clear error when the reference is not KernelBench-format
    opts = _options(device, precision, trials=trials, profile=not no_profile, min_runs=min_runs,
                    min_seconds=min_seconds, compile_baseline=compile_baseline, timeout_s=timeout)
    _emit(evaluate(reference, candidate, opts), as_json, "eval")


@app.command()
def doctor(as_json: bool = JsonOpt) -> None:
    """What this machine has for the job, and the fix for what is missing."""
    from kernelsmith.doctor import render, run_checks

    checks = run_checks()
    if as_json:
        print(json.dumps([c.__dict__ for c in checks]))
    else:
        render(checks)
    raise typer.Exit(0 if all(c.ok or not c.required for c in checks) else 1)


@app.command()
def optimize(task: Optional[str] = typer.Argument(None, help="KernelBench-format file or FILE:CLASS (omit with --resume)"),
             workdir: Optional[Path] = typer.Option(None, "--workdir", "-w", help="workdir to create or reuse"),
             backend: Optional[str] = typer.Option(None, "--backend", help="anthropic, openai, scripted, builtin or hf (a local checkpoint: --model PATH)"),
             model: Optional[str] = typer.Option(None, "--model", help="model name, passed as given"),
             base_url: Optional[str] = typer.Option(None, "--base-url", help="API endpoint (any OpenAI-compatible server)"),
             script: Optional[str] = typer.Option(None, "--script", help="scripted backend: turns JSON or events.jsonl"),
             device: Optional[str] = DeviceOpt, precision: Optional[str] = PrecisionOpt,
             max_turns: Optional[int] = typer.Option(None, "--max-turns", help="model calls (default 200)"),
             max_cost: Optional[float] = typer.Option(None, "--max-cost", help="USD"),
             timeout: Optional[float] = typer.Option(None, "--timeout", help="minutes"),
             inputs: List[str] = typer.Option([], "--input", help="input spec for FILE:CLASS, e.g. 'float32[8,1024]'"),
             init_args: Optional[str] = typer.Option(None, "--init-args", help="constructor args, e.g. '[1024, 0.5]'"),
             stream: Optional[bool] = typer.Option(None, "--stream/--no-stream",
                                                   help="stream model answers (default); off for broken servers"),
             as_json: bool = typer.Option(False, "--json", help="print the session events as JSONL"),
             resume: Optional[str] = typer.Option(None, "--resume", help="session id (or prefix) to continue")) -> None:
    """Run the agent: write, compile, verify and profile kernels; commit each new best to git."""
    from kernelsmith.agent import run as session
    from kernelsmith.backends import create_backend
    from kernelsmith.config import load_settings

    flags = {"backend": backend, "model": model, "base_url": base_url, "script": script, "device": device,
             "precision": precision, "max_turns": max_turns, "max_cost": max_cost, "timeout_min": timeout,
             "stream": stream}
    settings = load_settings(flags, [Path.cwd()] + ([workdir] if workdir else []))
    _check_budget(settings)
    if resume:
        folder = (workdir or Path.cwd()).resolve()
        raise typer.Exit(_run_session(
            lambda listeners, on_text: session.resume(settings, folder, resume, listeners, on_text), as_json))
    backend = create_backend(settings)  # a missing key or bad flag fails before a workdir is created
    opts = _options(settings.device, settings.precision)
    from kernelsmith import workdir as wd

    existing = workdir is not None and (workdir / wd.STATE_DIR / "config.json").is_file()
    _notice_defaults(backend.name if settings.backend is None else "", opts.device,
                     device_chosen=existing or settings.device is not None)
    path = session.prepare_workdir(task, workdir, opts.device, opts.precision, inputs, init_args)
    raise typer.Exit(_run_session(lambda listeners, on_text: session.start(settings, path, listeners, on_text), as_json))


def _notice_defaults(default_backend: str, device: str, device_chosen: bool) -> None:
    """One line on stderr for each default the user did not choose (no key, so the built-in
    policy; no GPU, for a new workdir: an existing one keeps the device it was made for)."""
    if default_backend == "builtin":
        print("notice: no API key configured: using the built-in offline policy "
              "(set ANTHROPIC_API_KEY or OPENAI_API_KEY, or --backend, for an LLM)", file=sys.stderr)
    if not device_chosen and device == "cpu":
        print("notice: no CUDA GPU visible: optimizing for the CPU target (C++ with OpenMP)", file=sys.stderr)


def _check_budget(settings) -> None:
    if settings.max_turns < 1:
        raise BadInput("--max-turns must be at least 1")
    if settings.max_cost is not None and settings.max_cost <= 0:
        raise BadInput("--max-cost must be positive")


def _run_session(run, as_json: bool) -> int:
    """Run with the live view, or with events as JSONL on stdout."""
    try:
        return _run_with_view(run, as_json)
    except KeyboardInterrupt as stop:  # here, not in main: typer turns Ctrl-C into a bare exit code 130
        return _interrupted(stop)


def _run_with_view(run, as_json: bool) -> int:
    from kernelsmith.console import SessionView

    if as_json:
        def print_event(event):
            print(json.dumps(event, default=str), flush=True)

        ending = run([print_event], None)
    else:
        with SessionView() as view:
            ending = run([view], view.on_text)
    _warn_git_changed(ending.git_changed)
    return ending.exit_code


def _warn_git_changed(paths: list[str]) -> None:
    """Only an unjailed agent can write .git/; what it planted there runs with the user's next git."""
    if paths:
        print(f"warning: {', '.join(paths)} changed during the session: git runs the programs they name "
              "(hooks, filters, fsmonitor) on your next git command here; read them before you run git",
              file=sys.stderr)


@app.command()
def bench(paths: List[Path] = typer.Argument(None, help="task files or folders (with --eval-only: REFERENCES CANDIDATES)"),
          backend: Optional[str] = typer.Option(None, "--backend", help="anthropic, openai, scripted, builtin or hf (a local checkpoint: --model PATH)"),
          model: Optional[str] = typer.Option(None, "--model"),
          base_url: Optional[str] = typer.Option(None, "--base-url"),
          script: Optional[str] = typer.Option(None, "--script", help="scripted backend: turns JSON"),
          runs: int = typer.Option(1, "--runs", help="sessions per task"),
          max_turns: Optional[int] = typer.Option(None, "--max-turns"),
          workers: int = typer.Option(1, "--workers", help="sessions at a time"),
          evals_per_gpu: int = typer.Option(1, "--evals-per-gpu", help="local sandbox: evaluations sharing a GPU "
                                            "(overlapped where it is idle; their jobs run one at a time)"),
          sandbox: str = typer.Option("local", "--sandbox", help="local or ray"),
          ray_address: Optional[str] = typer.Option(None, "--ray-address", help="join this Ray cluster"),
          device: Optional[str] = DeviceOpt, precision: Optional[str] = PrecisionOpt,
          out: Path = typer.Option(Path("bench-out"), "--out", help="results and workdirs"),
          resume: bool = typer.Option(False, "--resume", help="continue the bench in --out"),
          eval_only: bool = typer.Option(False, "--eval-only", help="score existing ModelNew files"),
          report: Optional[Path] = typer.Option(None, "--report", help="re-render the report of a bench folder"),
          lint: bool = typer.Option(True, "--lint/--no-lint", help="lint every task first"),
          sample: Optional[int] = typer.Option(None, "--sample", help="a random N of the tasks (seeded: "
                                               "--sample-seed; a --resume keeps its bench's)"),
          sample_seed: int = typer.Option(0, "--sample-seed"),
          baselines_cache: Optional[Path] = typer.Option(
              None, "--baselines-cache",
              help="compile-baseline cache shared by all sessions (default OUT/baselines.json; "
                   "seed it with bench/seed_baselines.py)")) -> None:
    """Run a policy over a task set (or score existing solutions) and report per level."""
    from kernelsmith import bench as bench_mod

    if report is not None:
        _render_bench(bench_mod.bench_report.load_rows(report), report, {})
        return
    flags = {"backend": backend, "model": model, "base_url": base_url, "script": script, "device": device,
             "precision": precision, "max_turns": max_turns,
             "baselines_cache": str(baselines_cache.resolve()) if baselines_cache else None}
    settings = load_bench_settings(flags)
    opts = _options(settings.device, settings.precision)
    plan = bench_mod.BenchPlan(settings, opts.device, out.resolve(), runs, workers, resume, lint,
                               meta=_bench_meta(settings, opts.device, runs, sandbox))
    sample, sample_seed = bench_mod.kept_sample(plan.out, sample, sample_seed, resume and not eval_only)
    if sample is not None:
        plan.meta.update(sample=sample, sample_seed=sample_seed)
    import contextlib

    if evals_per_gpu < 1:
        raise BadInput(f"--evals-per-gpu must be at least 1, not {evals_per_gpu}")
    with contextlib.closing(_make_sandbox(sandbox, opts.device, ray_address, evals_per_gpu)) as pool:
        rows = _bench_rows(bench_mod, plan, paths or [], pool, eval_only, (sample, sample_seed))
    _render_bench(rows, plan.out, plan.meta)


def load_bench_settings(flags: dict):
    from kernelsmith.config import load_settings

    return load_settings(flags, [Path.cwd()])


def _bench_meta(settings, device: str, runs: int, sandbox: str) -> dict:
    import platform
    import time as _time

    import torch

    gpu = torch.cuda.get_device_name(0) if device == "cuda" else platform.processor() or "CPU"
    return {"backend": settings.backend, "model": settings.model, "device": device, "gpu": gpu,
            "torch": torch.__version__, "runs": runs,
            "max_turns": settings.max_turns, "sandbox": sandbox, "host": platform.node(),
            "date": _time.strftime("%Y-%m-%d %H:%M"), "command": "kernelsmith " + " ".join(sys.argv[1:])}


def _make_sandbox(kind: str, device: str, ray_address: Optional[str], evals_per_gpu: int = 1):
    if kind == "local":
        from kernelsmith.sandbox.local import LocalSandbox

        return LocalSandbox(device, evals_per_gpu=evals_per_gpu)
    if kind == "ray":
        try:
            from kernelsmith.sandbox.ray_pool import RaySandbox
        except ImportError:
            raise BadInput("--sandbox ray needs Ray", hint="pip install 'kernelsmith[scale]'") from None
        return RaySandbox(device, address=ray_address)
    raise BadInput(f"unknown --sandbox {kind!r}", hint="local or ray")


def _bench_rows(bench_mod, plan, paths: list[Path], pool, eval_only: bool, sample=(None, 0)) -> list[dict]:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    if eval_only and len(paths) != 2:
        raise BadInput("--eval-only takes two paths: REFERENCES CANDIDATES")
    if not paths:
        raise BadInput("give task files or folders")
    tasks = None if eval_only else bench_mod.sample_tasks(bench_mod.task_files(paths), *sample)
    total = len(bench_mod.task_files(paths[:1])) if eval_only else len(tasks) * plan.runs
    counts = {"correct": 0, "faster": 0}
    columns = [TextColumn("bench"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.description}"),
               TimeElapsedColumn()]
    with Progress(*columns, transient=False) as bar:
        job = bar.add_task("", total=total)

        def on_row(row: dict) -> None:
            counts["correct"] += bool(row.get("correct"))
            counts["faster"] += bool(row.get("correct") and (row.get("speedup_vs_eager") or 0) > 1.0)
            bar.update(job, advance=1, description=f"correct {counts['correct']}, faster than eager "
                                                   f"{counts['faster']}; last: {row['task']} {row['status']}")
            bar.console.print(_row_line(row))  # above the bar on a terminal; the only progress in a log file

        names = bench_mod.task_names(tasks) if tasks else {}  # the rows' names (examples/*/model.py apart)

        def on_lint(path: Path, flags: list[str]) -> None:
            name = names.get(path, path.stem)
            bar.console.print(f"lint {bench_mod.level_of(path) or '-'}/{name}: {', '.join(flags) or 'ok'}")

        def on_stop(running: int) -> None:
            bar.console.print(f"interrupted: waiting for {running} running session(s) to end their turn "
                              "(Ctrl-C again quits now); continue with --resume")

        if eval_only:
            return bench_mod.eval_only(plan, paths[0], paths[1], pool, on_row)
        return bench_mod.run_bench(plan, tasks, pool, on_row, on_lint, on_stop)


def _row_line(row: dict) -> str:
    """One finished task as a plain line: level/task, verdict, speed-ups, wall time."""
    name = f"{row.get('level') or '-'}/{row['task']}" + (f" run {row['run']}" if row.get("run") else "")
    if row["status"] != "done":
        return f"{name}: {row['status']}: {row.get('error', '')[:160]}"
    if not row.get("correct"):
        return f"{name}: not correct ({row.get('wall_s', 0):.0f} s)"
    return (f"{name}: correct, {_speed(row, 'speedup_vs_eager')} vs eager, "
            f"{_speed(row, 'speedup_vs_compile')} vs compile ({row.get('wall_s', 0):.0f} s)")


def _speed(row: dict, key: str) -> str:
    return f"{row[key]:.2f}x" if row.get(key) else "?"


def _render_bench(rows: list[dict], out: Path, meta: dict) -> None:
    from rich.markdown import Markdown

    from kernelsmith import bench_report
    from kernelsmith.console import console

    if not rows:
        raise BadInput(f"no bench rows in {out}")
    meta = meta or _stored_meta(out)
    summary = bench_report.write_report(out, rows, meta)
    table, notes = bench_report.markdown(summary, meta).split("\n\n")[:2]
    console.print(Markdown(table))
    console.print(notes)  # errors and tasks not run: the rates above leave them out
    console.print(f"report: {out}/results.md, {out}/results.json, {out}/speedups.png")


def _stored_meta(out: Path) -> dict:
    """The method line of an earlier report, kept when --report re-renders it."""
    path = out / "results.json"
    return json.loads(path.read_text()).get("meta", {}) if path.is_file() else {}


@app.command()
def synth(out: Path = typer.Option(..., "--out", help="folder for tasks/, manifest.jsonl and README.md"),
          count: int = typer.Option(100, "--count", help="tasks to accept"),
          max_ops: int = typer.Option(5, "--max-ops", help="operators per task at most"),
          seed: int = typer.Option(0, "--seed", help="the same seed gives the same candidates"),
          device: Optional[str] = DeviceOpt,
          composer: str = typer.Option("combinatorial", "--composer", help="combinatorial, anthropic or openai"),
          against: List[Path] = typer.Option([], "--decontaminate-against",
                                             help="folder of evaluation tasks (repeatable)"),
          workers: int = typer.Option(1, "--workers", help="rubric jobs at a time"),
          resume: bool = typer.Option(False, "--resume", help="continue the run in --out"),
          eager_window: Optional[str] = typer.Option(None, "--eager-window",
                                                     help="LOW,HIGH eager ms (default 1,100 on cuda; 0.05,50 on cpu)"),
          threshold: Optional[float] = typer.Option(None, "--threshold", help="decontamination similarity (0-1)"),
          model: Optional[str] = typer.Option(None, "--model", help="LLM composer: model name"),
          base_url: Optional[str] = typer.Option(None, "--base-url", help="LLM composer: API endpoint"),
          as_json: bool = JsonOpt) -> None:
    """Synthesize a training set of fused tasks, checked by a rubric and decontaminated (docs/synth.md)."""
    from kernelsmith.synth import run as synth_run

    plan = synth_run.SynthPlan(out=out.resolve(), count=count, max_ops=max_ops, seed=seed,
                               device=_synth_device(device, out, count, resume), composer=composer,
                               against=list(against),
                               workers=workers, resume=resume, window_ms=_window(eager_window),
                               backend_flags={"model": model, "base_url": base_url})
    if threshold is not None:
        plan.threshold = threshold
    synth_run.validate(plan)  # bad input ends here, before a progress bar is drawn
    if as_json:
        print(json.dumps(synth_run.synthesize(plan)))
        return
    with synth_run.ProgressView(plan) as view:
        summary = synth_run.synthesize(plan, view.on_row)
    _report_synth(summary, plan.out)


def _synth_device(device: Optional[str], out: Path, count: int, resume: bool) -> str:
    """--device for synth. A resumed run whose count is already accepted checks nothing: it only draws its
    task files again from the seed, so a folder carried home as its manifest comes back without the GPU."""
    from kernelsmith.synth.run import read_manifest

    done = resume and sum(r.get("status") == "accepted" for r in read_manifest(out.resolve())) >= count
    return device if done and device in ("cuda", "cpu") else _options(device, None).device


def _window(text: Optional[str]):
    if text is None:
        return None
    try:
        low, high = (float(v) for v in text.split(","))
    except ValueError:
        raise BadInput(f"bad --eager-window {text!r}", "write LOW,HIGH in ms, e.g. 0.05,50") from None
    return (low, high)


def _report_synth(summary: dict, out: Path) -> None:
    from kernelsmith.console import console

    stages = ", ".join(f"{s} {n}" for s, n in summary["rejected_by_stage"].items()) or "none"
    if summary.get("restored"):
        console.print(f"restored {summary['restored']} accepted task file(s) missing from tasks/, drawn again from the seed")
    console.print(f"accepted {summary['accepted']} of {summary['target']} from {summary['candidates']} candidates; "
                  f"rejected by stage: {stages}")
    console.print(f"tasks: {out}/tasks, manifest: {out}/manifest.jsonl, summary: {out}/README.md")
    if summary["accepted"] < summary["target"]:
        raise typer.Exit(1)


WorkdirOpt = typer.Option(None, "--workdir", "-w", help="workdir (default: .)")


def _kernel_repo(workdir: Optional[Path]):
    from kernelsmith.gitops import KernelRepo

    return KernelRepo((workdir or Path.cwd()).resolve())


@app.command("log")
def log_cmd(workdir: Optional[Path] = typer.Argument(None, help="workdir (default: .)"), as_json: bool = JsonOpt) -> None:
    """The kernel commits on the current branch, with speed-ups, reward and turn."""
    from kernelsmith.console import console, kernel_log_table
    from kernelsmith.gitops import kernel_row

    repo = _kernel_repo(workdir)
    rows, accepted = [kernel_row(c) for c in repo.kernel_commits()], repo.accepted()
    for note in repo.ledger_notes():  # on stderr, so --json stays one object
        print(f"note: {note}", file=sys.stderr)
    if as_json:
        print(json.dumps({"accepted": accepted, "commits": rows}))
    elif not rows:
        console.print(f"no kernel commits in {repo.root} yet (run `kernelsmith optimize`)")
    else:
        console.print(kernel_log_table(rows, accepted))


@app.command()
def accept(rev: str = typer.Argument(..., help="a kernel commit (sha or prefix, tag, HEAD~1, ...)"),
           workdir: Optional[Path] = WorkdirOpt) -> None:
    """Record a kernel commit as accepted (tag and refs/kernelsmith/accepted); export uses it."""
    from kernelsmith.console import console

    done = _kernel_repo(workdir).accept(rev)
    console.print(f"[green]accepted[/] {done['sha'][:8]} {done['summary']} (tag {done['tag']})")
    console.print("next: kernelsmith export --out DIR, to package it as a Python module")


@app.command()
def revert(rev: str = typer.Argument(..., help="a kernel commit (sha or prefix, tag, HEAD~1, ...)"),
           workdir: Optional[Path] = WorkdirOpt) -> None:
    """Undo a kernel commit with a new commit; refused when that would lose or tangle work."""
    from kernelsmith.console import console

    repo = _kernel_repo(workdir)
    sha = repo.revert(rev)
    console.print(f"[green]reverted[/] as {sha[:8]}: {repo.commit_info(sha)['summary']}")
    if repo.index_note:
        from rich.markup import escape

        # soft-wrapped: a path in it stays whole, to copy
        console.print(f"[yellow]warning:[/] {escape(repo.index_note)}", highlight=False, soft_wrap=True)


@app.command()
def export(workdir: Optional[Path] = typer.Argument(None, help="workdir (default: .)"),
           out: Path = typer.Option(..., "--out", "-o", help="folder to write the package into"),
           rev: Optional[str] = typer.Option(None, "--rev", help="commit to export (default: the accepted one)"),
           name: Optional[str] = typer.Option(None, "--name", help="package name (default: <task>_kernel)"),
           as_json: bool = JsonOpt) -> None:
    """Package the accepted kernel as an importable Python package (a torch.library custom op)."""
    from kernelsmith.console import console
    from kernelsmith.export import export_kernel

    done = export_kernel((workdir or Path.cwd()).resolve(), out.resolve(), rev, name)
    if as_json:
        print(json.dumps(done))
        return
    console.print(f"[green]exported[/] {done['commit'][:8]} of {done['task']} to {done['path']}")
    console.print(f"use: sys.path.insert(0, {str(Path(done['path']).parent)!r}); import {done['package']}")


@app.command()
def review(target: Optional[Path] = typer.Argument(None, help="workdir, session folder or events.jsonl (default: .)"),
           session: Optional[str] = typer.Option(None, "--session", "-s", help="session id or prefix to open")) -> None:
    """Review sessions in a terminal UI: timeline, commits, diffs, logs; accept, revert, export."""
    from kernelsmith.gitops import KernelRepo
    from kernelsmith.tui import create_app

    review_app = create_app(target, session)
    KernelRepo(review_app.workdir)  # not a git repository: the one-line error before the screen clears
    review_app.run()


train_app = typer.Typer(no_args_is_help=True, help="Train an open model on kernelsmith's environment (issue 19).")
app.add_typer(train_app, name="train")


@train_app.command("import")
def train_import(
        source: Path = typer.Argument(..., help="a local checkpoint folder (config.json) or a .gguf file"),
        out: Path = typer.Option(..., "--out", "-o", help="new folder for the trainer-ready checkpoint"),
        chat_template: str = typer.Option("auto", "--chat-template",
                                          help="auto: install ChatML with tools only where the model's own "
                                          "template cannot show tools; chatml-tools: always; keep: never")) -> None:
    """Make a starting checkpoint for the trainer: a folder in float32, with a chat template that shows tools."""
    from rich.markup import escape

    from kernelsmith.console import console
    from kernelsmith.train import checkpoint

    summary = checkpoint.import_model(source.resolve(), out.resolve(), chat_template)
    console.print(f"{summary['parameters'] / 1e6:.1f}M parameters; {escape(summary['template'])}", soft_wrap=True)
    if summary.get("end_of_turn"):
        console.print(f"end of sequence: {escape(summary['end_of_turn'])}", soft_wrap=True)
    console.print(f"checkpoint: {escape(summary['out'])}", soft_wrap=True)


OneCallOpt = typer.Option(False, "--one-call-per-reply", help="a reply that made several tool calls becomes one "
                          "reply per call, each followed by its output (for a student whose replies are capped)")


@train_app.command("trajectories")
def train_trajectories(
        targets: List[str] = typer.Argument(..., help="workdirs (all their sessions), folders of workdirs, "
                                            "session folders, events.jsonl files or session ids"),
        out: Path = typer.Option(..., "--out", "-o", help="JSONL file to write (docs/trajectories.md)"),
        min_reward: Optional[float] = typer.Option(None, "--min-reward",
                                                   help="keep sessions whose final reward is at least this"),
        tokenizer: Optional[Path] = typer.Option(None, "--tokenizer",
                                                 help="local tokenizer folder whose chat template renders the chats"),
        workdir: Optional[Path] = typer.Option(None, "--workdir", "-w",
                                               help="workdir of session ids (default: .)"),
        one_call_per_reply: bool = OneCallOpt) -> None:
    """Export session records as trajectories: rendered chat, token ids, policy-token mask, rewards."""
    from kernelsmith.train import trajectories as tr

    tr.check_tokenizer_folder(tokenizer)  # before the sessions are looked for, and before transformers loads
    paths = tr.session_files(targets, (workdir or Path.cwd()).resolve())
    if not paths:
        raise BadInput(f"no session records in {', '.join(targets)}",
                       "give workdirs with sessions (.kernelsmith/sessions/), session folders or events.jsonl files")
    loaded = tr.load_tokenizer(tokenizer)
    summary = tr.export_trajectories(paths, loaded, tokenizer, out, min_reward, one_call_per_reply)
    for note in summary.notes:  # on stderr: the ledger's claims and keys, as `kernelsmith log` prints them
        print(f"note: {note}", file=sys.stderr)
    _report_trajectories(summary, out)


@train_app.command("rft")
def train_rft(
        tasks: Optional[List[Path]] = typer.Option(None, "--tasks", help="task files or folders the teacher works "
                                                   "on (e.g. kernelsmith synth's DIR/tasks)"),
        model: Path = typer.Option(..., "--model", help="the student: a local causal LM checkpoint with its tokenizer"),
        out: Path = typer.Option(..., "--out", "-o", help="the student's new checkpoint, with rollouts/, "
                                 "trajectories.jsonl, rft.json and metrics.jsonl"),
        data: Optional[Path] = typer.Option(None, "--data", help="instead of --tasks: trajectories already exported "
                                            "with the student's tokenizer (train trajectories, or an rft OUT's)"),
        teacher: str = typer.Option("builtin", "--teacher", help="builtin (no API key), anthropic, openai, scripted, "
                                    "or hf (the student samples itself)"),
        teacher_model: Optional[str] = typer.Option(None, "--teacher-model", help="the teacher backend's model"),
        base_url: Optional[str] = typer.Option(None, "--base-url", help="openai teacher: an OpenAI-compatible server"),
        script: Optional[str] = typer.Option(None, "--script", help="scripted teacher: turns JSON"),
        samples: int = typer.Option(4, "--samples", help="teacher sessions per task"),
        max_turns: Optional[int] = typer.Option(None, "--max-turns"),
        workers: int = typer.Option(1, "--workers", help="sessions at a time"),
        min_reward: float = typer.Option(0.0, "--min-reward", help="keep trajectories whose final reward exceeds this"),
        epochs: float = typer.Option(2.0, "--epochs"), lr: float = typer.Option(1e-5, "--lr"),
        grad_accum: int = typer.Option(8, "--grad-accum", help="trajectories per optimizer step"),
        max_tokens: Optional[int] = typer.Option(None, "--max-tokens", help="a trajectory whose replies reach past "
                                                 "it is left out; only the tool results after its last reply are "
                                                 "cut (default: the student's window, else 32768)"),
        max_reply_tokens: Optional[int] = typer.Option(None, "--max-reply-tokens", help="the student's longest reply "
                                                       "at run time (default: KERNELSMITH_MAX_TOKENS or the "
                                                       "configured max_tokens); a trajectory with a longer one is "
                                                       "left out"),
        one_call_per_reply: bool = typer.Option(False, "--one-call-per-reply", help="the teacher calls one tool a "
                                                "reply (builtin queues its calls; anthropic and openai are asked for "
                                                "no parallel calls), so compaction runs between them as it will for "
                                                "the student; replies of several calls are still split on export"),
        device: Optional[str] = DeviceOpt, precision: Optional[str] = PrecisionOpt) -> None:
    """Rejection-sampling fine-tuning: the teacher's verified sessions, selected, then SFT of the student."""
    import contextlib

    from kernelsmith import bench as bench_mod
    from kernelsmith.backends import checkpoint_window
    from kernelsmith.train import rft

    if teacher not in rft.TEACHERS:
        raise BadInput(f"unknown --teacher {teacher!r}", f"one of {', '.join(rft.TEACHERS)}")
    if samples < 1:
        raise BadInput(f"--samples must be at least 1, not {samples}")
    if max_reply_tokens is not None and max_reply_tokens < 1:
        raise BadInput(f"--max-reply-tokens must be at least 1, not {max_reply_tokens}")
    if max_tokens is not None and max_tokens < 1:
        raise BadInput(f"--max-tokens must be at least 1, not {max_tokens}")
    if bool(tasks) == (data is not None):
        raise BadInput("give --tasks (a teacher works on them) or --data (trajectories already exported), one of them")
    if not (model / "config.json").is_file():
        raise BadInput(f"no model checkpoint in {model}", "give a local folder with config.json, weights and a tokenizer")
    teacher_model = teacher_model or (str(model.resolve()) if teacher == "hf" else None)
    window = checkpoint_window(str(model))
    # the teacher works in the student's window, counted in the student's tokens: the system prompt and the
    # compactions the student will see; with --one-call-per-reply it calls one tool a reply, as the student will
    flags = {"backend": teacher, "model": teacher_model, "base_url": base_url, "script": script, "device": device,
             "precision": precision, "max_turns": max_turns, "context_window": window,
             "window_tokenizer": str(model.resolve()), "one_call_per_reply": one_call_per_reply or None}
    settings = _with_device(load_bench_settings(flags))
    max_tokens = max_tokens or window or rft.RftConfig.max_tokens
    plan = rft.RftPlan(bench_mod.task_files(tasks) if tasks else [], settings, samples, model.resolve(), out.resolve(),
                       workers, min_reward, rft.RftConfig(epochs=epochs, lr=lr, grad_accum=grad_accum, max_tokens=max_tokens,
                                                          max_reply_tokens=max_reply_tokens if max_reply_tokens is not None
                                                          else settings.max_tokens),
                       data.resolve() if data else None, one_call_per_reply)
    with contextlib.closing(_make_sandbox("local", settings.device, None)) as pool:
        summary = rft.run(plan, pool, on_row=_print_rollout, on_log=_print_training)
    _report_rft(summary)


@train_app.command("value")
def train_value(
        data: Path = typer.Option(..., "--data", help="trajectories JSONL (kernelsmith train trajectories, or rft's)"),
        model: Path = typer.Option(..., "--model", help="a causal LM checkpoint (the RFT student), or a critic"),
        out: Path = typer.Option(..., "--out", "-o", help="the critic's folder (with metrics.jsonl)"),
        epochs: int = typer.Option(2, "--epochs"), lr: float = typer.Option(1e-5, "--lr"),
        batch_size: int = typer.Option(4, "--batch-size"),
        min_reward: Optional[float] = typer.Option(None, "--min-reward", help="train on these trajectories only"),
        max_tokens: int = typer.Option(32768, "--max-tokens", help="a trajectory whose replies reach past it "
                                    "is left out; only the tool results after its last reply are cut"),
        seed: int = typer.Option(0, "--seed"), device: Optional[str] = DeviceOpt) -> None:
    """Value pretraining: a token-level critic on GAE returns (gamma 1, lambda 0.95) of the outcome reward."""
    from kernelsmith.train import critic, value

    if not ((model / "config.json").is_file() or critic.is_critic(model)):
        raise BadInput(f"no model checkpoint in {model}", "give a local folder with config.json and weights")
    rows, skipped = value.fitting(value.read_trajectories(data, min_reward), max_tokens)
    if not rows:
        raise BadInput(f"no trajectory to train on in {data}" + (f" ({skipped} over --max-tokens)" if skipped else ""),
                       "export some with `kernelsmith train trajectories`, or lower --min-reward")
    cfg = value.ValueConfig(epochs=epochs, lr=lr, batch_size=batch_size, max_tokens=max_tokens, seed=seed)
    summary = value.train(rows, model.resolve(), out.resolve(), cfg, _options(device, None).device,
                          on_step=_print_value_step)
    _report_value(summary, len(rows), skipped)


def _print_value_step(row: dict) -> None:
    from kernelsmith.console import console

    console.print(f"step {row['step']}/{row['of']} value loss {row['value_loss']:.4f} "
                  f"explained variance {row['explained_variance']:.3f}", soft_wrap=True)


def _report_value(summary: dict, rows: int, skipped: int) -> None:
    from rich.markup import escape
    from rich.table import Table

    from kernelsmith.console import console

    table = Table(title="value", show_header=False)
    table.add_row("trajectories", f"{rows}" + (f" ({skipped} over --max-tokens left out)" if skipped else ""))
    table.add_row("steps", str(summary["steps"]))
    table.add_row("value loss", f"{summary['first']['value_loss']:.4f} -> {summary['last']['value_loss']:.4f}")
    table.add_row("explained variance", f"{summary['last']['explained_variance']:.3f}")
    console.print(table)
    console.print(f"critic: {escape(summary['out'])}", soft_wrap=True)


@train_app.command("ppo")
def train_ppo(
        tasks: List[Path] = typer.Option(..., "--tasks", help="task files or folders to roll out on"),
        policy: Path = typer.Option(..., "--policy", help="the starting checkpoint (RFT's): also the reference"),
        critic: Path = typer.Option(..., "--critic", help="the pretrained critic (train value)"),
        out: Path = typer.Option(..., "--out", "-o", help="policy/, critic/, metrics.jsonl, state.json, rollouts/"),
        steps: int = typer.Option(10, "--steps", help="PPO steps in all (with --resume: up to this many)"),
        sessions: int = typer.Option(4, "--sessions", help="rollouts per task per step"),
        tasks_per_step: int = typer.Option(0, "--tasks-per-step", help="tasks a step rolls out on, drawn from "
                                           "a seeded shuffle epoch after epoch (0: every task, every step)"),
        max_turns: Optional[int] = typer.Option(None, "--max-turns", help="turns per rollout (150 in CUDA Agent)"),
        workers: int = typer.Option(1, "--workers", help="rollouts at a time"),
        epochs: int = typer.Option(1, "--epochs", help="PPO epochs over each step's batch"),
        lr: float = typer.Option(1e-6, "--lr"), critic_lr: float = typer.Option(1e-5, "--critic-lr"),
        kl_coef: float = typer.Option(1e-3, "--kl-coef", help="the low-variance KL loss to the reference"),
        temperature: float = typer.Option(0.7, "--temperature", help="sampling temperature of the rollouts"),
        micro_batch: int = typer.Option(1, "--micro-batch", help="trajectories per forward and backward "
                                        "(gradients accumulate over the step; lower it when memory runs out)"),
        resume: bool = typer.Option(False, "--resume", help="go on with the run in --out"),
        device: Optional[str] = DeviceOpt, precision: Optional[str] = PrecisionOpt) -> None:
    """PPO on rollouts through KernelEnv: the milestone reward, asymmetric clipping, GAE over policy tokens."""
    import contextlib

    from kernelsmith.train import critic as critics
    from kernelsmith.train import ppo_trainer

    if not (policy / "config.json").is_file():
        raise BadInput(f"no model checkpoint in {policy}", "give the folder `kernelsmith train rft` wrote")
    if not critics.is_critic(critic):
        raise BadInput(f"no critic in {critic}", "make one with `kernelsmith train value`")
    if steps < 1 or sessions < 1 or micro_batch < 1:
        raise BadInput("--steps, --sessions and --micro-batch must be at least 1")
    if tasks_per_step < 0:
        raise BadInput("--tasks-per-step must be 0 (every task) or more")
    settings = _with_device(load_bench_settings({"backend": "hf", "model": str(policy.resolve()), "device": device,
                                                 "precision": precision, "max_turns": max_turns}))
    from kernelsmith import bench as bench_mod

    cfg = ppo_trainer.PpoConfig(steps=steps, sessions=sessions, tasks_per_step=tasks_per_step, epochs=epochs, lr=lr,
                                critic_lr=critic_lr, kl_coef=kl_coef, temperature=temperature, micro_batch=micro_batch)
    plan = ppo_trainer.PpoPlan(bench_mod.task_files(tasks), settings, policy.resolve(), critic.resolve(),
                               out.resolve(), cfg, workers)
    from kernelsmith.train.progress import TrainProgress

    per_step = len(ppo_trainer.step_tasks(plan.tasks, tasks_per_step, 0, cfg.seed))
    view = TrainProgress("ppo", steps, per_step * sessions, ppo_trainer.next_step(plan.out) if resume else 0)
    with contextlib.closing(_make_sandbox("local", settings.device, None)) as pool, view:
        summary = ppo_trainer.train(plan, pool, resume, on_step=view.on_step, on_row=view.on_row)
    from rich.markup import escape

    from kernelsmith.console import console

    console.print(f"{len(summary['steps'])} step(s); policy and critic in {escape(summary['out'])}", soft_wrap=True)


@train_app.command("verl")
def train_verl(
        tasks: List[Path] = typer.Option(..., "--tasks", help="task files or folders (e.g. kernelsmith synth's DIR/tasks)"),
        model: str = typer.Option(..., "--model", help="the policy's checkpoint (RFT's): a local folder"),
        out: Path = typer.Option(..., "--out", "-o", help="data/, verl.yaml, agent_loop.yaml, launch.sh"),
        val_tasks: Optional[List[Path]] = typer.Option(None, "--val-tasks", help="held-apart tasks (default: --tasks)"),
        critic: Optional[str] = typer.Option(None, "--critic", help="an HF checkpoint for verl's critic "
                                             "(default: started from the policy)"),
        remote_model: bool = typer.Option(False, "--remote-model", help="--model and --critic exist only on the "
                                          "cluster's nodes: not checked here"),
        nodes: int = typer.Option(1, "--nodes", help="the trainer's nodes"),
        gpus_per_node: int = typer.Option(8, "--gpus-per-node"),
        steps: int = typer.Option(100, "--steps"), max_turns: int = typer.Option(150, "--max-turns"),
        samples: int = typer.Option(4, "--samples", help="rollouts per task per step"),
        batch_size: int = typer.Option(8, "--batch-size", help="tasks per step"),
        prompt_length: int = typer.Option(16384, "--prompt-length"),
        response_length: int = typer.Option(32768, "--response-length", help="tokens of a whole session after its prompt"),
        max_tokens_per_turn: int = typer.Option(8192, "--max-tokens-per-turn"),
        temperature: float = typer.Option(1.0, "--temperature"), lr: float = typer.Option(1e-6, "--lr"),
        critic_lr: float = typer.Option(1e-5, "--critic-lr"), kl_coef: float = typer.Option(1e-3, "--kl-coef"),
        engine: str = typer.Option("vllm", "--engine", help="verl's rollout engine: vllm or sglang"),
        tensor_parallel: int = typer.Option(1, "--tensor-parallel"),
        sandbox: str = typer.Option("ray", "--sandbox", help="ray: kernelsmith's pool on the cluster; local: each node's own"),
        sandbox_gpus: Optional[int] = typer.Option(None, "--sandbox-gpus", help="GPUs of the sandbox pool beside "
                                                   "the trainer's (default: --gpus-per-node)"),
        agent_workers: Optional[int] = typer.Option(None, "--agent-workers"),
        workdir_root: str = typer.Option("/tmp/kernelsmith-verl", "--workdir-root", help="the sessions' workdirs: "
                                         "a filesystem every node mounts, with --sandbox ray on several nodes"),
        device: str = typer.Option("cuda", "--device", help="the sessions' device"),
        validate: bool = typer.Option(True, "--validate/--no-validate", help="check the configuration with verl")) -> None:
    """A verl configuration and launch command for PPO on a Ray cluster (docs/train-verl.md)."""
    from rich.markup import escape

    from kernelsmith import bench as bench_mod
    from kernelsmith.console import console
    from kernelsmith.train.verl import config as verl_config

    plan = verl_config.VerlPlan(
        tasks=bench_mod.task_files(tasks), model=model, out=out.resolve(), critic=critic, remote_model=remote_model,
        val_tasks=bench_mod.task_files(val_tasks) if val_tasks else None, nodes=nodes, gpus_per_node=gpus_per_node,
        steps=steps, max_turns=max_turns, samples=samples, batch_size=batch_size, prompt_length=prompt_length,
        response_length=response_length, max_tokens_per_turn=max_tokens_per_turn, temperature=temperature, lr=lr,
        critic_lr=critic_lr, kl_coef=kl_coef, engine=engine, tensor_parallel=tensor_parallel, device=device,
        sandbox=sandbox, sandbox_gpus=sandbox_gpus, agent_workers=agent_workers, workdir_root=workdir_root)
    done = verl_config.run(plan, validate)
    for name, path in done["files"].items():
        console.print(f"{name}: {escape(str(path))}", soft_wrap=True)
    console.print("validated against verl: " + (", ".join(done["validated"]) if validate else "no (--no-validate)"))
    console.print(f"launch, on the Ray head node: bash {escape(str(done['files']['launch']))}\n"
                  f"which runs: {escape(done['launch'])}", soft_wrap=True)


def _with_device(settings):
    """Settings whose device is resolved (cuda when a GPU is visible), as the sessions' workers need it."""
    import dataclasses

    return dataclasses.replace(settings, device=_options(settings.device, settings.precision).device)


def _print_rollout(row: dict) -> None:
    from kernelsmith.console import console
    from kernelsmith.train.progress import rollout_line

    console.print(rollout_line(row), soft_wrap=True)


def _print_training(row: dict) -> None:
    from kernelsmith.console import console

    console.print(f"step {row.get('step', '?')} loss {row.get('loss', float('nan')):.4f}", soft_wrap=True)


def _report_rft(summary: dict) -> None:
    from rich.markup import escape
    from rich.table import Table

    from kernelsmith.console import console

    table = Table(title="rft", show_header=False)
    table.add_row("teacher sessions", str(summary["sessions"]))
    table.add_row("trajectories", f"{summary['trajectories']}, kept {summary['kept']}")
    table.add_row("rejected", ", ".join(f"{n} {why}" for why, n in summary["rejected"].items()) or "none")
    table.add_row("trained on", f"{summary['trained_on']} ({summary['past_window']} kept but past --max-tokens)")
    table.add_row("training steps", str(summary["steps"]))
    table.add_row("loss", f"{summary['first'].get('loss', float('nan')):.4f} -> {summary['last'].get('loss', float('nan')):.4f}")
    console.print(table)
    console.print(f"checkpoint: {escape(summary['out'])}", soft_wrap=True)


def _report_trajectories(summary, out: Path) -> None:
    from collections import Counter

    from rich.markup import escape
    from rich.table import Table

    from kernelsmith.console import console

    table = Table(title="trajectories", show_header=False)
    table.add_row("sessions read", str(summary.read))
    lines = f"{summary.lines} trajector{'y' if summary.lines == 1 else 'ies'}"
    table.add_row("exported", f"{summary.exported} session(s), {lines}")
    table.add_row("skipped", str(len(summary.skipped)))
    table.add_row("tokens", f"{summary.tokens:,}")
    table.add_row("policy tokens", f"{summary.policy_tokens:,} ({summary.policy_fraction:.1%})")
    console.print(table)
    for reason, count in Counter(reason for _, reason in summary.skipped).most_common():
        sessions = [s for s, r in summary.skipped if r == reason]
        console.print(f"skipped {count}: {escape(reason)} ({', '.join(sessions[:3])}{', ...' if count > 3 else ''})",
                      soft_wrap=True)
    console.print(f"written: {escape(str(out))}", soft_wrap=True)


def main(argv: Optional[list[str]] = None) -> int:
    """Console entry point: typed errors become one line and an exit code (their text escaped: a path or a
    shape in brackets is text, never Rich markup)."""
    from rich.markup import escape

    from kernelsmith.console import err_console

    argv = list(sys.argv[1:] if argv is None else argv)
    if "--debug" in argv:  # accepted anywhere on the line, not only before the command
        argv.remove("--debug")
        STATE["debug"] = True
    try:
        code = app(args=argv, prog_name="kernelsmith", standalone_mode=False)
        return code if isinstance(code, int) else 0
    except typer.Exit as done:
        return done.exit_code
    except KernelsmithError as err:
        if STATE["debug"]:
            raise
        err_console.print(f"[red]error:[/] {escape(err.message)}" + (f" [dim](hint: {escape(err.hint)})[/]" if err.hint else ""),
                          soft_wrap=True)
        return err.exit_code
    except KeyboardInterrupt as stop:
        return _interrupted(stop)
    except Exception as err:  # click usage errors and the unexpected
        return _unexpected(err)


def _interrupted(stop: BaseException | None) -> int:
    """Ctrl-C: exit 130, saying how to continue where the interrupted work knows it (a session does)."""
    from rich.markup import escape

    from kernelsmith.console import err_console

    again = getattr(stop, "resume_command", None)
    err_console.print("[yellow]interrupted[/]" + (f"; continue with: {escape(again)}" if again else ""),
                      soft_wrap=True)
    return 130


_PATH_ERRNOS = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOTDIR, errno.EISDIR, errno.ENOSPC, errno.EDQUOT,
                errno.ENAMETOOLONG}


def _unexpected(err: Exception) -> int:
    from rich.markup import escape

    from kernelsmith.console import err_console

    if hasattr(err, "format_message") and hasattr(err, "exit_code"):  # click's usage errors (typer vendors click)
        err_console.print(f"[red]error:[/] {escape(err.format_message())}", soft_wrap=True)
        return 2
    if type(err).__name__ == "Abort":  # click's wrapping of Ctrl-C (its cause is the KeyboardInterrupt)
        return _interrupted(err.__cause__)
    if STATE["debug"]:
        raise err
    if isinstance(err, OSError) and err.errno in _PATH_ERRNOS and err.filename:
        # a path the user gave (an output folder on a read-only disk, a file where a folder must be): theirs to fix
        err_console.print(f"[red]error:[/] {escape(str(err.filename))}: {escape(err.strerror or str(err))}",
                          soft_wrap=True)
        return 2
    err_console.print(f"[red]internal error:[/] {type(err).__name__}: {escape(str(err))} (rerun with --debug for the "
                      "traceback)")
    return 3


if __name__ == "__main__":
    sys.exit(main())
