"""Draw the pipeline DAG as text, Graphviz dot or Mermaid."""

from __future__ import annotations

from stylus.config.model import Pipeline


def _semantics(pipeline: Pipeline, name: str) -> str:
    sem = pipeline.processors[name].semantics
    short = {"at_least_once": "ALO", "at_most_once": "AMO", "exactly_once": "EO"}
    state = short[sem.state] if sem.state else "stateless"
    return f"state {state}, output {short[sem.output]}"


def render_text(pipeline: Pipeline) -> str:
    lines = [f"pipeline {pipeline.pipeline}"]
    for name in pipeline.topological_order():
        spec = pipeline.processors[name]
        ins = ", ".join(f"{t}({pipeline.topics[t].partitions})" for t in spec.inputs)
        outs = ", ".join(f"{t}({pipeline.topics[t].partitions})" for t in spec.outputs) or "-"
        lines.append(f"  [{ins}] -> {name} <{_semantics(pipeline, name)}> -> [{outs}]")
    return "\n".join(lines) + "\n"


def render_dot(pipeline: Pipeline) -> str:
    lines = [f'digraph "{pipeline.pipeline}" {{', "  rankdir=LR;"]
    for topic, topic_spec in pipeline.topics.items():
        lines.append(f'  "topic:{topic}" [label="{topic}\\n{topic_spec.partitions} partitions", shape=ellipse];')
    for name, spec in pipeline.processors.items():
        lines.append(f'  "proc:{name}" [label="{name}\\n{_semantics(pipeline, name)}", shape=box];')
        lines.extend(f'  "topic:{t}" -> "proc:{name}";' for t in spec.inputs)
        lines.extend(f'  "proc:{name}" -> "topic:{t}";' for t in spec.outputs)
    lines.append("}")
    return "\n".join(lines) + "\n"


def render_mermaid(pipeline: Pipeline) -> str:
    def ident(kind: str, name: str) -> str:
        return kind + "_" + "".join(c if c.isalnum() else "_" for c in name)

    lines = ["flowchart LR"]
    for topic in pipeline.topics:
        lines.append(f'  {ident("t", topic)}(["{topic}"])')
    for name, spec in pipeline.processors.items():
        lines.append(f'  {ident("p", name)}["{name}<br/>{_semantics(pipeline, name)}"]')
        lines.extend(f"  {ident('t', t)} --> {ident('p', name)}" for t in spec.inputs)
        lines.extend(f"  {ident('p', name)} --> {ident('t', t)}" for t in spec.outputs)
    return "\n".join(lines) + "\n"


RENDERERS = {"text": render_text, "dot": render_dot, "mermaid": render_mermaid}
