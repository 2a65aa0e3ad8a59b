"""`stylus dlq PIPELINE --processor NAME [--reinject] [--json]`: list dead letters, re-inject them after a fix."""

from __future__ import annotations

import json

import click

from stylus.runtime.deadletters import DeadLetter, read_dead_letters, reinject


def _preview(data: bytes | None, width: int = 60) -> str:
    if data is None:
        return "null"
    text = data.decode("utf-8", "backslashreplace")
    return text if len(text) <= width else text[: width - 3] + "..."


def _render(letters: list[DeadLetter], topic: str) -> str:
    if not letters:
        return f"no dead letters in {topic}\n"
    lines = [f"{len(letters)} dead letters in {topic}"]
    for letter in letters:
        info = letter.as_dict()
        src = info["source"]
        flag = "  [re-injected]" if letter.reinjected else ""
        lines.append(
            f"- {topic}[{letter.partition}]@{letter.offset}  from {src['topic']}[{src['partition']}]@{src['offset']}"
            f"  stage={info['stage']}{flag}"
        )
        lines.append(f"    error: {info['error']}")
        lines.append(f"    trace: {info['trace']}")
        lines.append(f"    key: {_preview(letter.key)}  value: {_preview(letter.value)}")
    return "\n".join(lines) + "\n"


@click.command("dlq")
@click.argument("pipeline_file", type=click.Path())
@click.option("--processor", "processor", required=True, help="the processor whose dead letters to show")
@click.option("--reinject", "do_reinject", is_flag=True,
              help="produce the letters not yet re-injected back to their source topic")
@click.option("--json", "as_json", is_flag=True, help="print JSON instead of text")
# Not stylus.cli.main.output_option: main.py imports this module at its bottom (circular under `python -m`).
@click.option("--output", "-o", type=click.Path(dir_okay=False), default=None,
              help="write the result to FILE instead of standard output")
def dlq(pipeline_file: str, processor: str, do_reinject: bool, as_json: bool, output: str | None) -> None:
    """List the dead letters of a processor (topic `<pipeline>.<processor>.dlq`); --reinject sends them back."""
    from stylus.cli.main import emit_result, load_or_exit
    from stylus.runtime.runner import resolved_bootstrap

    pipeline = load_or_exit(pipeline_file)
    if processor not in pipeline.processors:
        raise click.BadParameter(f"no processor `{processor}`; the pipeline has {sorted(pipeline.processors)}",
                                 param_hint="--processor")
    topic = pipeline.dlq_topic(processor)
    with resolved_bootstrap(pipeline) as bootstrap:
        letters = read_dead_letters(bootstrap, pipeline, processor)
        result = reinject(bootstrap, pipeline, processor, letters) if do_reinject else None
    if as_json:
        doc: dict[str, object] = {"topic": topic, "count": len(letters), "letters": [x.as_dict() for x in letters]}
        if result is not None:
            doc["reinjected"] = result.reinjected
            doc["already_reinjected"] = result.skipped_done
            doc["not_reinjectable"] = result.not_reinjectable
        emit_result(json.dumps(doc, indent=2) + "\n", output)
        return
    text = _render(letters, topic)
    if result is not None:
        text += (f"re-injected {result.reinjected} records to their source topics"
                 f" ({result.skipped_done} already re-injected earlier, {result.not_reinjectable} not re-injectable)\n")
    emit_result(text, output)
