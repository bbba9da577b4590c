"""Reads back an offline W&B run from its `.wandb` file, for tests.

wandb.Api cannot open offline runs and wandb 0.31 no longer ships a Python reader of its transaction log
(the Go core writes it), so this reads the file's framing -- LevelDB's log format, which W&B uses: 32 KiB
blocks of records, each with a 7-byte header (CRC, length, type) -- and hands each payload to W&B's own
protobuf class, wandb.proto.wandb_internal_pb2.Record.
"""

from __future__ import annotations

import json
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path

BLOCK = 32 * 1024
HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def payloads(path: Path):
    data = Path(path).read_bytes()
    ident, magic, version = struct.unpack("<4sHB", data[:HEADER])
    assert (ident, magic, version) == (b":W&B", 0xBEE1, 0), f"{path} is not a W&B transaction log"
    pos, parts = HEADER, []
    while pos + HEADER <= len(data):
        left_in_block = BLOCK - pos % BLOCK
        if left_in_block < HEADER:  # the block's tail is padding
            pos += left_in_block
            continue
        crc, length, kind = struct.unpack("<IHB", data[pos : pos + HEADER])
        chunk = data[pos + HEADER : pos + HEADER + length]
        if kind == 0 and length == 0:
            break
        assert zlib.crc32(bytes([kind]) + chunk) & 0xFFFFFFFF == crc, f"{path}: bad checksum at byte {pos}"
        pos += HEADER + length
        parts.append(chunk)
        if kind in (FULL, LAST):
            yield b"".join(parts)
            parts = []


@dataclass
class OfflineRun:
    """What the W&B server would show after `wandb sync`: the run's identity, config, history, summary."""

    id: str = ""
    name: str = ""
    group: str = ""
    job_type: str = ""
    tags: list[str] = field(default_factory=list)
    config: dict = field(default_factory=dict)
    history: list[dict] = field(default_factory=list)
    summary: dict = field(default_factory=dict)
    metrics: dict = field(default_factory=dict)  # name -> the define_metric record as a dict
    exit_code: int | None = None
    preempting: bool = False
    resumed: bool = False


def read_run(path: Path, into: OfflineRun | None = None) -> OfflineRun:
    """One .wandb file; pass the OfflineRun of an earlier segment to continue it (a resumed run)."""
    import wandb
    from google.protobuf.json_format import MessageToDict

    # run.finish() returns before W&B's core process has written the whole file; teardown waits for it.
    wandb.teardown()
    from wandb.proto import wandb_internal_pb2 as pb

    run = into or OfflineRun()
    for payload in payloads(path):
        record = pb.Record()
        record.ParseFromString(payload)
        kind = record.WhichOneof("record_type")
        if kind == "run":
            r = record.run
            run.id, run.name, run.group, run.job_type, run.tags = (
                r.run_id,
                r.display_name,
                r.run_group,
                r.job_type,
                list(r.tags),
            )
            run.resumed = run.resumed or r.resumed
            for item in r.config.update:
                run.config[item.key] = json.loads(item.value_json)
        elif kind == "config":
            for item in record.config.update:
                run.config[item.key] = json.loads(item.value_json)
        elif kind == "history":
            run.history.append(
                {(item.key or "/".join(item.nested_key)): json.loads(item.value_json) for item in record.history.item}
            )
        elif kind == "summary":
            for item in record.summary.update:
                run.summary[item.key or "/".join(item.nested_key)] = json.loads(item.value_json)
        elif kind == "metric":
            m = MessageToDict(record.metric, preserving_proto_field_name=True)
            run.metrics[m.get("name") or m.get("glob_name")] = m
        elif kind == "exit":
            run.exit_code = record.exit.exit_code
        elif kind == "preempting":
            run.preempting = True
    return run


def read_offline_runs(run_dir: Path) -> OfflineRun:
    """Every offline segment of the run in run_dir/wandb, oldest first, as W&B joins them on sync."""
    run = OfflineRun()
    for folder in sorted(Path(run_dir, "wandb").glob("offline-run-*")):
        for f in folder.glob("run-*.wandb"):
            read_run(f, run)
    return run
