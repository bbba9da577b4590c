"""metrics.csv: the rows of metrics.jsonl as a table, for a spreadsheet or `pandas.read_csv`."""

from __future__ import annotations

import csv
import io
import logging
from pathlib import Path
from typing import Any

from lnbench.atomic import replacing
from lnbench.training.sinks import RunInfo

log = logging.getLogger("lnbench")


class CsvSink:
    """One row per logged record (every split in one file, told apart by the `split` column), written
    and flushed as it comes, so a killed run keeps every row but the last.

    The header is every key seen so far, in the order first seen; a row leaves a cell empty where its
    record has no such key (a val row has no lr). A record that brings a new key -- only a split's first
    record does (the first val row, a test at another length) -- rewrites the file with the wider header,
    atomically: a few times per run. The same goes for a resume: the checkpoint keeps the row count and
    the header, and the file is rewritten with the rows up to it (a byte offset, as metrics.jsonl keeps,
    would not survive a header that grew after the checkpoint).
    """

    def __init__(self, *, run: RunInfo, resume: dict[str, Any] | None, file: str):
        self.path = Path(run.run_dir) / file
        self.path.parent.mkdir(parents=True, exist_ok=True)  # logger.csv.file=tables/metrics.csv
        self.where = str(self.path)
        kept = resume or {}
        self.columns: list[str] = list(kept.get("columns", []))
        self.rows = 0
        if "rows" in kept:  # a resume: the rows up to the checkpoint, under its header
            old = self._read()
            if len(old) < kept["rows"]:
                log.warning(
                    "%s has %d rows, fewer than the %d it had at the checkpoint: rows are missing.",
                    self.path,
                    len(old),
                    kept["rows"],
                )
            self._rewrite(old[: kept["rows"]])
        else:  # a new run, or a resumed one that did not write this file before: the rows from now on
            self._rewrite([])
        self._f = open(self.path, "a", newline="")

    def _read(self) -> list[dict[str, str]]:
        if not self.path.exists():
            return []
        with open(self.path, newline="") as f:
            return list(csv.DictReader(f))

    def _rewrite(self, rows: list[dict[str, Any]]) -> None:
        with replacing(self.path) as tmp:
            with open(tmp, "w", newline="") as f:
                if self.columns:
                    writer = csv.DictWriter(f, self.columns, extrasaction="ignore")
                    writer.writeheader()
                    writer.writerows(rows)
        self.rows = len(rows)

    def log(self, record: dict[str, Any]) -> None:
        new = [k for k in record if k not in self.columns]
        if new:
            self._f.close()
            rows = self._read()
            self.columns += new
            self._rewrite(rows)
            self._f = open(self.path, "a", newline="")
        line = io.StringIO()
        csv.DictWriter(line, self.columns).writerow(record)
        self._f.write(line.getvalue())  # one write per row
        self._f.flush()
        self.rows += 1

    def state(self) -> dict[str, Any]:
        return {"rows": self.rows, "columns": list(self.columns)}

    def finish(self, summary: dict[str, Any]) -> None:
        self._f.close()
