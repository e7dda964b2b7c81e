"""Rich rendering for the terminal (results of compile, verify, profile, eval, doctor)."""

from __future__ import annotations

import time

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from kernelsmith.evaluation.result import EvalResult
from kernelsmith.session.verdict import verdict

console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False)


def _fmt_ms(value) -> str:
    if value is None:
        return "-"
    return f"{value * 1e3:.1f} µs" if value < 1 else f"{value:.3f} ms"


def _fmt_x(value) -> str:
    return "-" if value is None else f"{value:.2f}x"


def render_eval(result: EvalResult, title: str = "evaluation") -> None:
    verdict = "[green]correct[/]" if result.clean else "[red]rejected[/]"
    console.print(f"[bold]{title}[/]: {verdict}  reward [bold]{result.reward:g}[/]  "
                  f"({result.device}, {result.precision}{', ' + result.gpu if result.gpu else ''})")
    if result.error:
        console.print(f"[red]{result.error}[/]")
    for violation in result.violations:
        if violation != result.error.removeprefix("rejected: ").removeprefix("rejected while profiling: "):
            console.print(f"[red]violation:[/] {violation}")
    if result.trials:
        errs = [t.get("max_abs_err") for t in result.trials if t.get("max_abs_err") is not None]
        if errs:
            console.print(f"{len(result.trials)} trials, max abs error {max(errs):.3g}")
    if result.timings_ms:
        render_timings(result)
    for note in result.notes:
        if note and len(note) < 300:
            console.print(f"[dim]{note}[/]")


def render_timings(result: EvalResult) -> None:
    table = Table(title="timings (median of CUDA-event or host-clock runs, L2 flushed)", title_justify="left")
    for col in ("", "median", "p10 - p90", "speed-up"):
        table.add_column(col, justify="right" if col else "left")
    cand = result.timings_ms.get("candidate")
    for name, ms in result.timings_ms.items():
        if name == "compile":
            continue
        spread = result.spread_ms.get(name)
        speed = None if name.startswith("candidate") or not cand else ms / cand
        table.add_row(name, _fmt_ms(ms), f"{_fmt_ms(spread[0])} - {_fmt_ms(spread[1])}" if spread else "",
                      _fmt_x(speed) if speed else "")
    console.print(table)
    console.print(f"speed-up vs eager [bold]{_fmt_x(result.speedup_vs_eager)}[/], vs torch.compile "
                  f"[bold]{_fmt_x(result.speedup_vs_compile)}[/]"
                  + (f" (best mode: {result.compile_mode})" if result.compile_mode else ""))
    roof = result.roofline
    if roof.get("pct_of_bandwidth") is not None:
        console.print(f"roofline: {roof['min_bytes'] / 1e6:.1f} MB, {roof['flops'] / 1e9:.2f} GFLOP; "
                      f"{roof['pct_of_bandwidth']:.1f}% of bandwidth, {roof['pct_of_flops']:.1f}% of FLOP/s "
                      f"({roof['bound']}-bound, floor {_fmt_ms(roof['floor_ms'])})")


class SessionView:
    """The live terminal view of a session, fed by session events and streamed model text.

    Complete lines of model text are printed as they arrive (partial lines wait), each tool
    call and result is one compact line, and a status line at the bottom shows turn,
    tokens, cost, best speed-up and elapsed time. The line is redrawn from the clock, not only
    on events, so that a long tool call (a first profile can spend minutes measuring
    torch.compile baselines) shows what is running and for how long.
    """

    def __init__(self, out: Console | None = None):
        from rich.live import Live

        self.out = out or console
        self.pending_text = ""
        self.status = {"turn": 0, "tokens": 0, "cost": 0.0, "best": "none yet", "start": None, "model": ""}
        # (tool calls of the last turn whose results have not come yet, since when): one tuple, replaced
        # whole, because Live's refresh thread reads it while events arrive
        self.running: tuple[list[str], float] = ([], 0.0)
        self.ended = False
        self.live = Live(console=self.out, transient=True, refresh_per_second=4, get_renderable=self._live_line)

    def __enter__(self):
        self.live.__enter__()
        return self

    def __exit__(self, *exc):
        self.flush_text()
        self.live.__exit__(*exc)

    def on_text(self, delta: str) -> None:
        self.pending_text += delta
        *lines, self.pending_text = self.pending_text.split("\n")
        for line in lines:
            self._print_model_text(line)

    def flush_text(self) -> None:
        if self.pending_text:
            self._print_model_text(self.pending_text)
            self.pending_text = ""

    def _print_model_text(self, line: str) -> None:
        # A Text, not print(style=, markup=False): print's options apply to everything it draws, the live
        # status line included, which then showed as literal "[reverse] ... [/]" in italics.
        self.out.print(Text(line, style="italic"), highlight=False)

    def __call__(self, event: dict) -> None:
        self.flush_text()
        handler = getattr(self, "_" + event["kind"], None)
        if handler:
            handler(event)
        self.status["start"] = self.status["start"] or event["t"]
        self.live.refresh()

    def _live_line(self) -> Text:
        try:
            return Text("") if self.ended else Text(f" {self.status_line(time.time())} ", style="reverse")
        except Exception:  # noqa: BLE001  (an error here would stop Live's refresh thread for good)
            return Text("")

    def status_line(self, now: float) -> str:
        s = self.status
        elapsed = now - (s["start"] or now)
        line = (f"turn {s['turn']} | {s['tokens']:,} tokens | ${s['cost']:.2f} | best {s['best']} | "
                f"{elapsed / 60:.1f} min")
        names, since = self.running
        if names:
            line += f" | {names[0]} running {_clock(now - since)}"
        return line

    def _session_start(self, e: dict) -> None:
        cfg = e["config"]
        self.status["model"] = cfg.get("model", "")
        self.out.print(f"[bold]session {e['session_id']}[/] on {e['task']} ({cfg.get('device')}, "
                       f"{cfg.get('precision')}) with {cfg.get('backend')}:{cfg.get('model')} in {e['workdir']}")

    def _resume(self, e: dict) -> None:
        self.running = ([c["name"] for c in e["pending_tool_calls"]], e["t"])  # re-run first
        self.out.print(f"[bold]resumed[/] after turn {e['from_turn']}"
                       + (f", re-running {len(e['pending_tool_calls'])} pending tool call(s)" if e["pending_tool_calls"] else ""))

    def _model_turn(self, e: dict) -> None:
        usage = e["usage"]
        self.status["turn"] = e["turn"]
        self.status["tokens"] += usage.get("input_tokens", 0) + usage.get("output_tokens", 0)
        self.status["cost"] += usage.get("cost_usd", 0.0)
        calls = e["message"].get("tool_calls", [])
        for call in calls:
            self.out.print(f"[cyan]-> {escape(call['name'])}[/]({escape(_args_preview(call['arguments']))})",
                           soft_wrap=True)
        self.running = ([call["name"] for call in calls], e["t"])

    def _tool_result(self, e: dict) -> None:
        names, _ = self.running
        self.running = (names[1:], e["t"])  # results come in call order
        first = e["content"].strip().splitlines()[0] if e["content"].strip() else ""
        colour = "green" if e["ok"] else "red"
        self.out.print(f"   [{colour}]{escape(e['name'])}:[/] {escape(first[:160])}", markup=True, highlight=False)

    def _commit(self, e: dict) -> None:
        eager = e["speedup_vs_eager"]
        self.status["best"] = f"{eager:.2f}x" if eager is not None else "verified"
        self.out.print(f"[bold green]committed {e['sha'][:8]}[/] {e['summary']}")

    def _compaction(self, e: dict) -> None:
        self.out.print(f"[dim]context compacted: {e['before_tokens']:,} -> {e['after_tokens']:,} tokens[/]")

    def _session_end(self, e: dict) -> None:
        self.ended, self.running = True, ([], 0.0)
        self.live.refresh()
        render_session_summary(e, self.out)


def _clock(seconds: float) -> str:
    """m:ss"""
    minutes, secs = divmod(int(max(seconds, 0)), 60)
    return f"{minutes}:{secs:02d}"


def _args_preview(args: dict) -> str:
    parts = []
    for key, value in args.items():
        text = str(value)
        parts.append(f"{key}={text[:40]!r}" + ("..." if len(text) > 40 else "") if "\n" not in text
                     else f"{key}=<{len(text.splitlines())} lines>")
    return ", ".join(parts)


def render_session_summary(end: dict, out: Console | None = None) -> None:
    summary = end["summary"]
    table = Table(title=f"session ended: {end['reason']}", title_justify="left")
    table.add_column("")
    table.add_column("")
    best = summary.get("best")
    success, line = verdict(best)
    table.add_row("verdict", f"[green]{line}[/]" if success else f"[bold yellow]{line}[/]")
    table.add_row("best", "none" if not best else
                  f"{best['sha'][:8]} (turn {best['turn']}): {_fmt_x(best['speedup_vs_eager'])} vs eager, "
                  f"{_fmt_x(best['speedup_vs_compile'])} vs torch.compile, reward {best['reward']:g}")
    usage = summary.get("usage", {})
    table.add_row("turns", f"{summary.get('turns')} ({summary.get('attempts')} evaluations)")
    table.add_row("tokens", f"{usage.get('input_tokens', 0):,} in, {usage.get('output_tokens', 0):,} out")
    table.add_row("cost", f"${usage.get('cost_usd', 0.0):.2f}")
    table.add_row("elapsed", f"{summary.get('elapsed_s', 0) / 60:.1f} min")
    if summary.get("finish_summary"):
        table.add_row("agent says", summary["finish_summary"])
    (out or console).print(table)


def kernel_log_table(rows: list[dict], accepted: str | None) -> Table:
    """Kernel commits (gitops.kernel_row dicts, newest first) as a table; the accepted one marked."""
    table = Table(title="kernel commits (newest first)", title_justify="left")
    for name, justify in (("commit", "left"), ("turn", "right"), ("vs eager", "right"), ("vs compile", "right"),
                          ("reward", "right"), ("accepted", "center"), ("summary", "left")):
        table.add_column(name, justify=justify, no_wrap=name != "summary")
    for row in rows:
        table.add_row(row["sha"][:8], "-" if row["turn"] is None else str(row["turn"]),
                      _fmt_x(row["speedup_vs_eager"]), _fmt_x(row["speedup_vs_compile"]),
                      "-" if row["reward"] is None else f"{row['reward']:g}",
                      "[green]✓[/]" if row["sha"] == accepted else "", row["summary"])
    return table
