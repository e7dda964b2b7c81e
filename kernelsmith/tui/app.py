"""`kernelsmith review`: a Textual app over a workdir's session records and its git history.

Tabs: Sessions, Timeline (every turn: the model's text, tool calls and results, evaluations,
commits), Commits (speed-ups, reward, turn, the accepted one), Attempts (each snapshot and its
evaluation) and Chart (best speed-up over turns). Keys act on the selected row; those that
change files ask first. A timer follows a session whose record is still growing (live mode).
"""

from __future__ import annotations

from rich.markup import escape

import json
import subprocess
import sys
from pathlib import Path

from rich.text import Text
from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Footer, Header, Static, TabbedContent, TabPane

from kernelsmith.errors import KernelsmithError
from kernelsmith.gitops import KernelRepo
from kernelsmith.tui import data
from kernelsmith.tui.screens import ConfirmScreen, ExportScreen, HelpScreen, TextScreen

TABS = ("sessions", "timeline", "commits", "attempts", "chart")
STATUS = {"ok": Text("✓", style="green"), "fail": Text("✗", style="red"), "": Text(""), None: Text("…")}


def _x(value) -> str:
    return "-" if value is None else f"{value:.2f}x"


class ReviewApp(App):
    TITLE = "kernelsmith review"
    CSS = """
    #tabs { height: 1fr; }
    #status { height: 1; background: $boost; padding: 0 1; }
    DataTable { height: 1fr; }
    #chart-text { padding: 1 1; }
    """
    BINDINGS = [
        Binding("question_mark", "help", "Help"),
        Binding("a", "accept", "Accept"),
        Binding("r", "revert", "Revert"),
        Binding("d", "diff('parent')", "Diff"),
        Binding("b", "diff('best')", "Diff best", show=False),
        Binding("m", "mark", "Mark", show=False),
        Binding("c", "diff('mark')", "Diff mark", show=False),
        Binding("l", "details", "Logs"),
        Binding("o", "restore", "Restore", show=False),
        Binding("v", "verify", "Verify"),
        Binding("f", "follow", "Live", show=False),
        Binding("R", "reload", "Reload", show=False),
        Binding("q", "quit", "Quit"),
        *[Binding(str(i + 1), f"tab('{name}')", name.title(), show=False) for i, name in enumerate(TABS)],
    ]
    HELP = [
        ("1-5 / click", "switch tab: Sessions, Timeline, Commits, Attempts, Chart"),
        ("↑ ↓ / click", "select a row"),
        ("enter / l", "open the selected row in full: a whole turn, a tool result, an evaluation's build "
                      "and result logs, a commit's message, a session's config"),
        ("d", "diff of the selected commit or attempt against its parent (model_new.py, kernels/, notes)"),
        ("b", "diff of the selected commit or attempt against the session's best commit"),
        ("m, then c", "mark a commit or attempt, then diff the selected one against the mark"),
        ("a", "accept the selected commit (tag + refs/kernelsmith/accepted; asks first), then offers to export it"),
        ("r", "revert the selected commit with a new commit (asks first; refused with the reason when unsafe)"),
        ("o", "restore the selected attempt into the working files (asks first; HEAD and the index stay)"),
        ("v", "re-run verify on the current working files (kernelsmith verify, in the background)"),
        ("f", "live mode on/off: follow the session as its record grows"),
        ("R", "reload the record and the git history now"),
        ("?", "this help"),
        ("q", "quit (esc closes a pop-up or a full view)"),
    ]

    def __init__(self, workdir: Path, session_id: str | None = None, poll_s: float = 1.0):
        super().__init__()
        self.workdir, self.repo = workdir, KernelRepo(workdir)
        self.sessions: list[data.Session] = []
        self.session: data.Session | None = None
        self.commits: list[dict] = []
        self.accepted: str | None = None
        self.mark: tuple[str, str] | None = None  # (label, sha) of the diff base chosen with m
        self.follow = False
        self.verify_output: str | None = None
        self.poll_s, self._wanted = poll_s, session_id

    # -- layout ----------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Header()
        with TabbedContent(initial="timeline", id="tabs"):
            for name in TABS:
                with TabPane(name.title(), id=name):
                    yield Static(id="chart-text") if name == "chart" else DataTable(id=f"{name}-table", cursor_type="row")
        yield Static(id="status", markup=False)
        yield Footer()

    def on_mount(self) -> None:
        self._columns()
        self.sessions = data.load_sessions(self.workdir)
        chosen = [s for s in self.sessions if s.session_id == self._wanted] or self.sessions[-1:]
        self.show_session(chosen[0] if chosen else None)
        self.follow = bool(self.session and self.session.state.end is None)
        self.set_interval(self.poll_s, self.poll)
        self.table("timeline").focus()

    def _columns(self) -> None:
        columns = {"sessions": ("session", "task", "turns", "best", "cost", "status"),
                   "timeline": ("turn", "what", "", "summary"),
                   "commits": ("commit", "turn", "vs eager", "vs compile", "reward", "acc", "summary"),
                   "attempts": ("#", "turn", "tool", "", "result")}
        for name, labels in columns.items():
            self.query_one(f"#{name}-table", DataTable).add_columns(*labels)

    def table(self, name: str) -> DataTable:
        return self.query_one(f"#{name}-table", DataTable)

    # -- filling the views -----------------------------------------------------------------------

    def show_session(self, session: data.Session | None) -> None:
        self.session = session
        self.sub_title = f"{session.state.task} · {session.session_id}" if session else "no sessions recorded"
        self.refresh_views()

    def refresh_views(self) -> None:
        self.commits = data.commit_rows(self.repo)
        self.accepted = self.repo.accepted()
        self._fill_sessions()
        self._fill_timeline()
        self._fill_commits()
        self._fill_attempts()
        self._fill_chart()
        self._fill_status()

    def _refill(self, name: str, rows: list[tuple], keys: list[str]) -> None:
        """Replace a table's rows, keeping the cursor where it was (or on the last row when following)."""
        table = self.table(name)
        row = table.cursor_row
        table.clear()
        for cells, key in zip(rows, keys):
            table.add_row(*cells, key=key)
        if rows:
            table.move_cursor(row=len(rows) - 1 if self.follow and name == "timeline" else min(row, len(rows) - 1))

    def _fill_sessions(self) -> None:
        rows = [(s.session_id, s.state.task, str(s.state.turn), s.best_text, f"${s.state.cost_usd:.2f}",
                 ("▶ " if s is self.session else "") + s.status) for s in self.sessions]
        self._refill("sessions", rows, [s.session_id for s in self.sessions])

    def _fill_timeline(self) -> None:
        entries = self.session.entries if self.session else []
        rows = [(str(e.turn), e.kind, STATUS[e.status], e.title[:200]) for e in entries]
        self._refill("timeline", rows, [str(i) for i in range(len(entries))])

    def _fill_commits(self) -> None:
        rows = [(c["sha"][:8], "-" if c["turn"] is None else str(c["turn"]), _x(c["speedup_vs_eager"]),
                 _x(c["speedup_vs_compile"]), "-" if c["reward"] is None else f"{c['reward']:g}",
                 STATUS["ok"] if c["sha"] == self.accepted else "", c["summary"].removeprefix("kernelsmith: "))
                for c in self.commits]
        self._refill("commits", rows, [c["sha"] for c in self.commits])

    def _fill_attempts(self) -> None:
        found = self.session.attempts if self.session else []
        rows = [(str(a["attempt"]), str(a["turn"]), a["tool"], STATUS[None if a["ok"] is None else ("ok" if a["ok"] else "fail")],
                 a["summary"][:200]) for a in found]
        self._refill("attempts", rows, [str(a["attempt"]) for a in found])

    def _fill_chart(self) -> None:
        self.query_one("#chart-text", Static).update(chart_text(self.session) if self.session else "no session")

    def _fill_status(self) -> None:
        s = self.session
        text = "no session record in this workdir" if s is None else (
            f"turn {s.state.turn} · {s.state.attempts} evaluations · best {s.best_text} · ${s.state.cost_usd:.2f} · "
            f"{s.status}" + (" · live" if self.follow else "") + (f" · mark {self.mark[0]}" if self.mark else ""))
        self.query_one("#status", Static).update(text)

    # -- live mode -------------------------------------------------------------------------------

    def poll(self) -> None:
        """Reload when the record grew or a new session appeared (cheap: a stat per tick)."""
        if not self.follow:
            return
        paths = list(data.session_paths(self.workdir))
        grew = self.session is not None and self.session.path.stat().st_size != self.session.size
        if grew or len(paths) != len(self.sessions):
            self.action_reload(newest=len(paths) != len(self.sessions))

    def action_reload(self, newest: bool = False) -> None:
        self.sessions = data.load_sessions(self.workdir)
        current = self.session.session_id if self.session and not newest else None
        chosen = [s for s in self.sessions if s.session_id == current] or self.sessions[-1:]
        self.show_session(chosen[0] if chosen else None)

    def action_follow(self) -> None:
        self.follow = not self.follow
        self.notify("live mode on: following the record" if self.follow else "live mode off")
        if self.follow:
            self.action_reload()
        self._fill_status()

    # -- navigation ------------------------------------------------------------------------------

    def action_tab(self, name: str) -> None:
        self.query_one("#tabs", TabbedContent).active = name
        if name != "chart":
            self.table(name).focus()

    def on_tabbed_content_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        """A tab clicked with the mouse: its table takes the keys, as with 1-5."""
        if event.pane.id != "chart":
            self.table(event.pane.id).focus()

    @property
    def active_tab(self) -> str:
        return self.query_one("#tabs", TabbedContent).active

    def selected_key(self, name: str) -> str | None:
        table = self.table(name)
        if not table.row_count:
            return None
        return table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.data_table.id == "sessions-table":
            self.show_session(next(s for s in self.sessions if s.session_id == event.row_key.value))
            self.action_tab("timeline")
        else:
            self.action_details()

    def action_help(self) -> None:
        self.push_screen(HelpScreen(self.HELP))

    # -- what is selected ------------------------------------------------------------------------

    def selected_revision(self) -> tuple[str, str] | None:
        """(label, sha) of the selected commit or attempt snapshot, or None with a notice."""
        tab = self.active_tab
        if tab == "commits" and self.selected_key("commits"):
            sha = self.selected_key("commits")
            return f"commit {sha[:8]}", sha
        if tab == "attempts" and self.selected_key("attempts"):
            attempt = self._attempt(int(self.selected_key("attempts")))
            return f"attempt {attempt['attempt']}", attempt["sha"]
        self.notify("select a commit (3) or an attempt (4) first", severity="warning")
        return None

    def _attempt(self, number: int) -> dict:
        return next(a for a in self.session.attempts if a["attempt"] == number)

    def _selected_commit(self, action: str) -> str | None:
        if self.active_tab != "commits" or not self.selected_key("commits"):
            self.notify(f"select a commit in the Commits tab (3) to {action} it", severity="warning")
            return None
        return self.selected_key("commits")

    # -- viewing ---------------------------------------------------------------------------------

    def action_details(self) -> None:
        tab, key = self.active_tab, self.selected_key(self.active_tab) if self.active_tab != "chart" else None
        if key is None:
            return
        if tab == "timeline":
            entry = self.session.entries[int(key)]
            self.push_screen(TextScreen(f"turn {entry.turn} · {entry.kind} · {entry.title[:60]}", entry.detail))
        elif tab == "attempts":
            attempt = self._attempt(int(key))
            self.push_screen(TextScreen(f"attempt {attempt['attempt']} ({attempt['tool']}, turn {attempt['turn']})",
                                        attempt["log"] or "no evaluation was recorded for this attempt"))
        elif tab == "commits":
            self.push_screen(TextScreen(f"commit {key[:8]}", self.repo.git.show("--stat", key)))
        elif tab == "sessions":
            session = next(s for s in self.sessions if s.session_id == key)
            self.push_screen(TextScreen(f"session {key}", json.dumps(session.state.config, indent=2)))

    def action_diff(self, against: str) -> None:
        chosen = self.selected_revision()
        if chosen is None:
            return
        label, sha = chosen
        base = self._diff_base(against, sha)
        if base is not None:
            self.push_screen(TextScreen(f"{label} against {base[0]}", data.diff(self.repo, base[1], sha), diff=True))

    def _diff_base(self, against: str, sha: str) -> tuple[str, str] | None:
        if against == "parent":
            return "its parent", f"{sha}^"
        if against == "mark":
            if self.mark is None:
                self.notify("mark a commit or attempt with m first", severity="warning")
            return self.mark
        best = self.session.state.best if self.session else None
        if best is None:
            self.notify("this session has no best commit yet", severity="warning")
            return None
        return f"the best ({best['sha'][:8]})", best["sha"]

    def action_mark(self) -> None:
        chosen = self.selected_revision()
        if chosen:
            self.mark = chosen
            self.notify(f"marked {chosen[0]}: press c on another row to diff against it")
            self._fill_status()

    # -- actions that change files (each asks first) ---------------------------------------------

    def action_accept(self) -> None:
        sha = self._selected_commit("accept")
        if sha:
            self.push_screen(ConfirmScreen(f"Accept commit {sha[:8]}?",
                                           "It is tagged and recorded as refs/kernelsmith/accepted; "
                                           "export packages the accepted kernel."),
                             lambda yes: yes and self._accept(sha))

    def _accept(self, sha: str) -> None:
        if self._attempt_git(lambda: self.repo.accept(sha), f"accepted {sha[:8]}"):
            self.push_screen(ExportScreen(str(self.workdir / "export")), self._export)

    def _export(self, folder: str | None) -> None:
        if folder:
            self.export_worker(folder)

    @work(thread=True, exclusive=True, group="export")
    def export_worker(self, folder: str) -> None:
        from kernelsmith.export import export_kernel

        try:
            done = export_kernel(self.workdir, Path(folder).expanduser().resolve())
            self.call_from_thread(self.notify, f"exported to {done['path']}")
        except KernelsmithError as err:
            self.call_from_thread(self.notify, f"export refused: {err}", severity="error", timeout=10)

    def action_revert(self) -> None:
        sha = self._selected_commit("revert")
        if sha:
            self.push_screen(ConfirmScreen(f"Revert commit {sha[:8]}?",
                                           "A new commit undoes its changes to model_new.py, kernels/ and notes; "
                                           "the working copies of those files follow."),
                             lambda yes: yes and self._attempt_git(lambda: self.repo.revert(sha), f"reverted {sha[:8]}"))

    def action_restore(self) -> None:
        if self.active_tab != "attempts" or not self.selected_key("attempts"):
            self.notify("select an attempt in the Attempts tab (4) to restore it", severity="warning")
            return
        attempt = self._attempt(int(self.selected_key("attempts")))
        self.push_screen(ConfirmScreen(f"Restore attempt {attempt['attempt']} into the working files?",
                                       "model_new.py, kernels/ and notes are overwritten with the snapshot's "
                                       "(uncommitted edits to them are lost); HEAD and the index stay."),
                         lambda yes: yes and self._attempt_git(lambda: self.repo.restore_attempt(attempt["sha"]),
                                                               f"restored attempt {attempt['attempt']}"))

    def _attempt_git(self, change, done: str) -> bool:
        """Run a gitops change; a refusal is shown with its reason, never raised."""
        try:
            change()
        except KernelsmithError as err:
            self.notify(str(err), title="refused", severity="error", timeout=10)
            return False
        self.notify(done)
        if self.repo.index_note:
            self.notify(escape(self.repo.index_note), title="git's index", severity="warning", timeout=20)
        self.refresh_views()
        return True

    # -- verify ----------------------------------------------------------------------------------

    def action_verify(self) -> None:
        self.notify("verify started on the working files…")
        self.verify_worker()

    @work(thread=True, exclusive=True, group="verify")
    def verify_worker(self) -> None:
        """`kernelsmith verify --json` in a subprocess: candidate code never runs in this process."""
        proc = subprocess.run([sys.executable, "-m", "kernelsmith.cli", "verify", str(self.workdir), "--json"],
                              capture_output=True, text=True, cwd=self.workdir)
        self.call_from_thread(self._verified, proc.returncode, proc.stdout, proc.stderr)

    def _verified(self, code: int, stdout: str, stderr: str) -> None:
        try:
            result = json.loads(stdout.strip().splitlines()[-1])
            line = data.eval_summary("verify", result)
            self.verify_output = data.eval_log("verify", result)
        except (ValueError, IndexError):  # a one-line error on stderr instead of a result
            line = (stderr.strip().splitlines() or ["verify failed"])[-1]
            self.verify_output = stdout + stderr
        self.notify(f"verify: {line}", severity="information" if code == 0 else "error", timeout=10)
        self.push_screen(TextScreen(f"verify of the working files (exit {code})", self.verify_output))


def chart_text(session: data.Session) -> Text:
    """Best speed-up vs eager over turns as a unicode sparkline, with the commits under it."""
    series = data.best_over_turns(session)
    text = Text(f"best speed-up vs eager over {len(series)} turns (each column a turn; · = none measured yet)\n\n")
    text.append(data.sparkline([v for _, v in series]) + "\n", style="bold green")
    measured = [v for _, v in series if v is not None]
    if measured:
        text.append(f"low {min(measured):.2f}x   high {max(measured):.2f}x   last {measured[-1]:.2f}x\n")
    text.append("\ncommits of this session:\n")
    for c in session.state.commits:
        text.append(f"  turn {c['turn']:>3}  {c['sha'][:8]}  {_x(c['speedup_vs_eager'])} vs eager, "
                    f"{_x(c['speedup_vs_compile'])} vs compile, reward {c['reward']:g}\n")
    return text
