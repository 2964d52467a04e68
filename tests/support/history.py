"""Reading the history tables (``console.admin.HistoryInline``) a page shows: each row as
its columns' text, so a test says what an operator reads without matching markup."""

from __future__ import annotations

from html.parser import HTMLParser

# The vocabulary's columns, by the class of their cells; a subclass's own columns keep
# their field's name (attempt, worker, generation …).
COLUMNS = {
    "when": "at",
    "what": "what",
    "change": "change",
    "by": "by",
    "via": "via",
    "message_shown": "message",
    "detail_shown": "detail",
}


class _Rows(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tables: list[list[dict[str, str]]] = []
        self.cell: str | None = None  # the column whose text is being read

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        classes = (dict(attrs).get("class") or "").split()
        if tag == "table" and "history-table" in classes:
            self.tables.append([])
        elif tag == "tr" and "history-row" in classes and self.tables:
            self.tables[-1].append({"kind": dict(attrs).get("data-kind") or ""})
        elif tag == "td" and self.tables and self.tables[-1]:
            name = next((c.removeprefix("field-") for c in classes if c.startswith("field-")), None)
            self.cell = COLUMNS.get(name, name) if name else None
            if self.cell:
                self.tables[-1][-1][self.cell] = ""

    def handle_endtag(self, tag: str) -> None:
        if tag == "td" and self.cell:
            row = self.tables[-1][-1]
            row[self.cell] = " ".join(row[self.cell].split())
            self.cell = None

    def handle_data(self, data: str) -> None:
        if self.cell:
            self.tables[-1][-1][self.cell] += data


def history_tables(page: str) -> list[list[dict[str, str]]]:
    """Every history table of ``page``, each a list of its rows (oldest first): the row's
    ``kind`` and each column's text (``at``, ``what``, ``change``, ``by``, ``via``,
    ``message``, ``detail`` and the table's own)."""
    parser = _Rows()
    parser.feed(page)
    return parser.tables


def history_rows(page: str) -> list[dict[str, str]]:
    """The rows of the page's one history table."""
    [table] = history_tables(page)
    return table
