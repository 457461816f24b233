"""Kafka-aware guard rules: a hot-config change that would leave a topic outside a rule is refused, with the
rule's name and text, before anything reaches the config center (docs/metaserver.md, "Guard rules").

Rules come from ``configs/guardrules.yaml`` until an admin saves them in the console (then from the database,
so every MetaServer peer applies the same ones). Each rule constrains one catalog key, optionally only on
topics of a ``topic.grade`` or routed to a cluster. A change is judged on the value each affected topic would
have in force afterwards (topic > cluster > global > catalog default, as the SDK resolves it): a change at a
topic's scope judges that topic; at the global or a cluster's scope it judges that scope and every topic with
its own namespace that does not override the key. Only what the change moves is judged: a topic already
outside a rule does not block an unrelated change.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from sqlalchemy import Engine

from ykafka import catalog
from ykafka.catalog import GLOBAL, Scope, ScopeKind
from ykafka.errors import InvalidConfigValue

from ..domain import edited_docs
from ..domain.hotconfig import ConfigRejected, PushPlan
from .models import guard_rules

log = structlog.get_logger("metaserver.guards")

_PACKAGED = Path(__file__).resolve().parent / "guardrules.yaml"  # configs/guardrules.yaml, in the server wheel
DEFAULT_FILE = _PACKAGED if _PACKAGED.exists() else Path(__file__).resolve().parents[2] / "configs" / "guardrules.yaml"
MAX_RULES = 200


class GuardRulesInvalid(Exception):
    """The rules text does not parse or a rule is malformed; ``errors`` maps a place to the reason."""

    def __init__(self, errors: dict[str, str]) -> None:
        self.errors = errors
        super().__init__("; ".join(f"{k}: {v}" for k, v in errors.items()))


class Rule(BaseModel):
    """One guard rule: ``key``'s value in force must satisfy exactly one check (``min`` and ``max`` may pair)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=r"^[A-Za-z0-9._-]{1,64}$")
    text: str = Field(min_length=1, max_length=300)
    key: str
    grade: str | None = Field(default=None, pattern=r"^P[0-2]$")
    cluster: str | None = Field(default=None, pattern=r"^[A-Za-z0-9._-]{1,200}$")
    equals: str | int | float | bool | None = None
    min: float | None = None
    max: float | None = None
    partitions_left_min: int | None = Field(default=None, ge=1, le=1_000_000)

    @model_validator(mode="after")
    def _one_check(self) -> Rule:
        if self.key not in catalog.KEYS:
            raise ValueError(f"unknown catalog key {self.key[:80]!r}")
        checks = [self.equals is not None, self.min is not None or self.max is not None,
                  self.partitions_left_min is not None]
        if sum(checks) != 1:
            raise ValueError("give exactly one of: equals, min / max, partitions_left_min")
        if self.equals is not None:
            try:
                catalog.parse(self.key, self.equals)
            except InvalidConfigValue as exc:
                raise ValueError(f"equals: {exc.reason}") from None
        if self.partitions_left_min is not None and self.key != "producer.partitions.exclude":
            raise ValueError("partitions_left_min applies to producer.partitions.exclude only")
        return self

    def summary(self) -> str:
        """One line: where the rule applies, what it requires, its text (the audit log's form of a rule)."""
        where = " ".join(x for x in (f"grade {self.grade}" if self.grade else "",
                                     f"cluster {self.cluster}" if self.cluster else "") if x) or "every topic"
        if self.equals is not None:
            must = f"= {catalog.render(self.key, catalog.parse(self.key, self.equals))}"
        elif self.partitions_left_min is not None:
            must = f"leaves >= {self.partitions_left_min} partitions"
        else:
            must = " ".join(x for x in (f">= {self.min:g}" if self.min is not None else "",
                                        f"<= {self.max:g}" if self.max is not None else "") if x)
        return f"{self.key} {must} on {where}: {self.text}"

    def judge(self, value: Any, partitions: int | None) -> str | None:
        """Why ``value`` (typed, as the catalog parses it) breaks this rule, or None when it keeps it."""
        shown = catalog.render(self.key, value)
        if self.equals is not None:
            want = catalog.parse(self.key, self.equals)
            return None if value == want else f"{self.key}={shown or '(empty)'}"
        if self.partitions_left_min is not None:
            excluded = set(value or ())
            if not excluded:
                return None
            if partitions is None:
                return f"{self.key}={shown}, and the topic's partition count could not be read"
            if partitions == 0:
                return None  # the topic does not exist on its cluster yet: nothing is written to it to protect
            left = len(set(range(partitions)) - excluded)
            return None if left >= self.partitions_left_min else (
                f"{self.key}={shown} leaves {left} of {partitions} partitions")
        number = float(value)
        if (self.min is not None and number < self.min) or (self.max is not None and number > self.max):
            return f"{self.key}={shown}"
        return None


class RuleSet(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rules: list[Rule] = Field(default_factory=list, max_length=MAX_RULES)


def parse_rules(text: str) -> list[Rule]:
    """The rules of a YAML text (``rules: [...]``); GuardRulesInvalid naming each bad place (never its input)."""
    try:
        data = yaml.safe_load(text) if text.strip() else {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "yaml"
        raise GuardRulesInvalid({where: "not valid YAML"}) from None
    try:
        rules = RuleSet.model_validate(data or {}).rules
    except ValidationError as exc:
        errors: dict[str, str] = {}
        for err in exc.errors(include_input=False, include_url=False):
            loc = ".".join(str(p) for p in err["loc"] if p not in ("function-after[_one_check(), Rule]",))
            errors[loc or "rules"] = str(err["msg"]).removeprefix("Value error, ")
        raise GuardRulesInvalid(errors) from None
    names = [r.name for r in rules]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise GuardRulesInvalid({"rules": f"rule names must be unique: {', '.join(dupes)}"})
    return rules


@dataclass(frozen=True)
class InForce:
    """The rules in force and where they come from (``file`` or ``console``, with the edit's version)."""

    rules: list[Rule]
    body: str
    source: str
    version: int
    updated_by: str | None = None
    updated_at: float | None = None


def in_force(engine: Engine, path: Path | None = None) -> InForce:
    """The rules saved in the console, else those of the file (``configs/guardrules.yaml``)."""
    doc = edited_docs.current(engine, guard_rules, (path or DEFAULT_FILE).read_text, "rules: []\n")
    return InForce(parse_rules(doc.body), doc.body, doc.source, doc.version, doc.updated_by, doc.updated_at)


def save(engine: Engine, body: str, who: str, path: Path | None = None) -> InForce:
    """Store new rules (checked first: nothing stored when one is malformed) and audit the edit."""
    rules = parse_rules(body)
    before = in_force(engine, path)
    edited_docs.store(engine, guard_rules, body, who, edited_docs.Stored(body, before.source, before.version),
                      "guard.rules", "guard-rules", {f"rule {r.name}": r.summary() for r in before.rules},
                      {f"rule {r.name}": r.summary() for r in rules})
    return in_force(engine, path)


# --- judging a change ---------------------------------------------------------------------------------

Layer = Mapping[str, str]


@dataclass
class World:
    """What judging needs to read, behind callables so the checks stay pure: the released values of a scope,
    every topic namespace's values (for changes at a broad scope), a topic's cluster and partition count."""

    released: Callable[[Scope], Layer]
    topics: Callable[[], dict[str, Layer]]
    # (topic, cluster) -> count; 0 when the cluster has no such topic, None when the count cannot be read
    partitions: Callable[[str, str], int | None]
    cluster_of: Callable[[str, Layer], str]  # a topic's cluster: its route.cluster, its placement, the default
    default_cluster: str


def _typed(name: str, raw: str | None) -> Any:
    if raw is None:
        return catalog.KEYS[name].default
    try:
        return catalog.parse(name, raw)
    except InvalidConfigValue:
        return catalog.KEYS[name].default  # a value the SDK refuses: the client keeps its default


def _after(before: Layer, plan: PushPlan) -> dict[str, str]:
    out = {k: v for k, v in before.items() if k not in plan.delete}
    out.update(plan.set)
    return out


def _resolve(layers: list[tuple[str, Layer]], name: str) -> tuple[str | None, str]:
    """(raw value, the layer it comes from), most specific layer first; (None, "default") when none sets it."""
    for label, layer in layers:
        if name in layer:
            return layer[name], label
    return None, "default"


def judge(plan: PushPlan, before: Layer, rules: list[Rule], world: World) -> dict[str, str]:
    """``{"guard:<rule>": "<text>: <what breaks it>"}`` for each rule the change breaks ({} when none)."""
    changed = set(plan.set) | set(plan.delete)
    relevant = [r for r in rules if r.key in changed or (r.grade and "topic.grade" in changed)
                or (r.cluster and "route.cluster" in changed)]
    if not relevant:
        return {}
    scope, mine = plan.scope, _after(before, plan)
    subjects: list[tuple[str, str | None, list[tuple[str, Layer]]]] = []  # (topic or scope, cluster, layers)
    if scope.kind is ScopeKind.TOPIC:
        cluster = world.cluster_of(scope.name, mine)
        subjects.append((scope.name, cluster, [("change", mine), ("cluster", world.released(
            Scope(ScopeKind.CLUSTER, cluster))), ("global", world.released(GLOBAL))]))
    elif scope.kind in (ScopeKind.GLOBAL, ScopeKind.CLUSTER):
        glob = mine if scope.kind is ScopeKind.GLOBAL else world.released(GLOBAL)
        clusters: dict[str, Layer] = {}

        def cluster_layer(name: str) -> tuple[str, Layer]:
            if scope.kind is ScopeKind.CLUSTER and name == scope.name:
                return "change", mine
            if name not in clusters:
                clusters[name] = world.released(Scope(ScopeKind.CLUSTER, name))
            return "cluster", clusters[name]

        own_cluster = scope.name if scope.kind is ScopeKind.CLUSTER else world.default_cluster
        subjects.append((str(scope), own_cluster, [cluster_layer(own_cluster),
                                                   ("change" if scope.kind is ScopeKind.GLOBAL else "global", glob)]))
        for topic, layer in sorted(world.topics().items()):
            cluster = world.cluster_of(topic, layer)
            if scope.kind is ScopeKind.CLUSTER and cluster != scope.name:
                continue
            subjects.append((topic, cluster, [("topic", layer), cluster_layer(cluster),
                                              ("change" if scope.kind is ScopeKind.GLOBAL else "global", glob)]))
    else:  # a group's scope: consumer keys only, judged at that scope over the global one
        subjects.append((str(scope), None, [("change", mine), ("global", world.released(GLOBAL))]))
    errors: dict[str, str] = {}
    for rule in relevant:
        for subject, on_cluster, layers in subjects:
            raw_grade, grade_from = _resolve(layers, "topic.grade")
            grade = _typed("topic.grade", raw_grade)
            if rule.grade and grade != rule.grade:
                continue
            if rule.cluster and on_cluster != rule.cluster:
                continue
            raw, source = _resolve(layers, rule.key)
            if "change" not in (source, grade_from) and not (rule.cluster and scope.kind is ScopeKind.TOPIC
                                                              and "route.cluster" in changed):
                continue  # the change does not move this subject's value: not its business
            is_topic = scope.kind is ScopeKind.TOPIC or subject != str(scope)
            count = (world.partitions(subject, on_cluster or world.default_cluster)
                     if rule.partitions_left_min is not None and is_topic else None)
            if rule.partitions_left_min is not None and not is_topic:
                continue  # a broad scope's own value is judged on each topic it reaches, not on its own
            why = rule.judge(_typed(rule.key, raw), count)
            if why:
                where = f"topic {subject}" if is_topic else subject
                errors[f"guard:{rule.name}"] = f"{rule.text}: {where} would get {why}"
                break
    return errors


def enforce(plan: PushPlan, before: Layer, rules: list[Rule], world: World) -> None:
    """Raise ConfigRejected (422, nothing written) naming every rule the change breaks."""
    errors = judge(plan, before, rules, world)
    if errors:
        raise ConfigRejected(errors, "refused by guard rules")
