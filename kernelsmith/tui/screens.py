"""The review app's pop-ups: a yes/no confirmation for anything that changes files, the export
prompt that follows an accept, a scrollable text view (diffs, logs, full turns) and help."""

from __future__ import annotations

from rich.syntax import Syntax
from rich.table import Table
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import Button, Footer, Input, Label, Static


class ConfirmScreen(ModalScreen[bool]):
    """Yes or no, with the consequence spelled out; y/enter confirms, n/escape cancels."""

    BINDINGS = [Binding("y", "answer(True)", "Yes"), Binding("n", "answer(False)", "No"),
                Binding("escape", "answer(False)", "Cancel", show=False)]
    DEFAULT_CSS = """
    ConfirmScreen { align: center middle; }
    ConfirmScreen > Vertical { width: 70; max-width: 95%; height: auto; border: thick $warning; background: $surface; padding: 1 2; }
    ConfirmScreen Horizontal { height: auto; margin-top: 1; }
    ConfirmScreen Button { margin-right: 2; }
    """

    def __init__(self, question: str, consequence: str):
        super().__init__()
        self.question, self.consequence = question, consequence

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(f"[b]{self.question}[/b]")
            yield Static(self.consequence)
            with Horizontal():
                yield Button("Yes (y)", id="yes", variant="warning")
                yield Button("No (n)", id="no")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()  # the safe answer is the default

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


class ExportScreen(ModalScreen[str | None]):
    """After an accept: export the kernel now? The answer is the folder, or None."""

    BINDINGS = [Binding("escape", "skip", "Skip")]
    DEFAULT_CSS = """
    ExportScreen { align: center middle; }
    ExportScreen > Vertical { width: 70; max-width: 95%; height: auto; border: thick $accent; background: $surface; padding: 1 2; }
    ExportScreen Horizontal { height: auto; margin-top: 1; }
    ExportScreen Button { margin-right: 2; }
    """

    def __init__(self, default_folder: str):
        super().__init__()
        self.default_folder = default_folder

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label("[b]Export the accepted kernel as a Python package?[/b]")
            yield Static("It is written into this folder (which must not hold a package of that name yet):")
            yield Input(self.default_folder, id="folder")
            with Horizontal():
                yield Button("Export", id="export", variant="primary")
                yield Button("Not now (esc)", id="skip")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(self.query_one("#folder", Input).value.strip() or None if event.button.id == "export" else None)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value.strip() or None)

    def action_skip(self) -> None:
        self.dismiss(None)


class TextScreen(Screen):
    """A full-screen, scrollable text: a diff (coloured), a log, a whole turn."""

    BINDINGS = [Binding("escape", "app.pop_screen", "Back"), Binding("q", "app.pop_screen", "Back", show=False)]
    DEFAULT_CSS = """
    TextScreen #title { dock: top; height: 1; background: $accent; color: $text; padding: 0 1; }
    TextScreen VerticalScroll { height: 1fr; }
    """

    def __init__(self, title: str, text: str, diff: bool = False):
        super().__init__()
        self.title_text, self.text, self.is_diff = title, text, diff

    def compose(self) -> ComposeResult:
        yield Static(self.title_text, id="title", markup=False)
        body = Syntax(self.text, "diff", theme="ansi_dark", word_wrap=True) if self.is_diff else self.text
        with VerticalScroll():
            yield Static(body, id="body", markup=False)
        yield Footer()


class HelpScreen(ModalScreen):
    """Every key of the app and what it does (from the app's bindings, so it cannot drift)."""

    BINDINGS = [Binding("escape", "app.pop_screen", "Close"), Binding("question_mark", "app.pop_screen", "Close")]
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll { width: 76; max-width: 98%; height: 90%; border: thick $accent; background: $surface; }
    """

    def __init__(self, keys: list[tuple[str, str]]):
        super().__init__()
        self.keys = keys

    def compose(self) -> ComposeResult:
        table = Table(title="kernelsmith review: keys (esc closes; the mouse works too)", expand=True,
                      title_justify="left", show_edge=False)
        table.add_column("key", no_wrap=True)
        table.add_column("what it does")
        for key, what in self.keys:
            table.add_row(key, what)
        with VerticalScroll():
            yield Static(table)
