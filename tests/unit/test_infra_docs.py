"""The docs name what the code really has. infra/: every setting, every service, an
environment file rote accepts; services/kernel/README.md (which infra/README.md refers
to): the rule saying which environment variables hold secrets. In README.md, infra/ and
the README.md beside each package: every `rote` command shown exists with its flags, and
every subject, request payload and trigger shown exists and decodes as its contract
(tests/e2e/test_readme_cli.py runs the loop)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import msgspec

from contracts import subjects
from contracts.catalog import CONTRACTS
from contracts.tasks import Trigger
from services.cli import build_parser
from services.kernel import secrets
from services.kernel.runtime import SERVICE_MODULES
from services.kernel.secrets import MIN_SCANNED_SECRET_CHARS, MIN_SECRET_CHARS, secret_floor
from services.kernel.settings import Settings
from services.scheduler.engine import COMMANDS as INTAKE_COMMANDS
from services.scheduler.triggers import TriggerError, validate

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "infra" / "README.md").read_text()
SECRETS_DOC = (ROOT / "services" / "kernel" / "README.md").read_text()
SETTINGS_SOURCE = (ROOT / "services" / "kernel" / "settings.py").read_text()


def env_file(path: Path) -> dict[str, str]:
    """KEY=VALUE lines as systemd's EnvironmentFile reads them (no quoting used)."""
    pairs = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            pairs[key.strip()] = value.strip()
    return pairs


def test_every_setting_is_in_the_environment_table() -> None:
    variables = set(re.findall(r'"(ROTE_[A-Z_]+)"', SETTINGS_SOURCE))
    assert "ROTE_STREAM_REPLICAS" in variables
    table = README[README.index("## 5. Environment") :]
    documented = set(re.findall(r"^\| `(ROTE_[A-Z_]+)` \|", table, re.MULTILINE))
    assert variables == documented


def test_every_service_is_in_the_services_table() -> None:
    rows = set(re.findall(r"^\| `([a-z]+)` \|", README, re.MULTILINE))
    assert set(SERVICE_MODULES) <= rows


def test_the_example_environment_file_is_accepted() -> None:
    env = env_file(ROOT / "infra" / "systemd" / "rote.env.example")
    settings = Settings.from_env(env)
    assert settings.stream_replicas == 3
    assert settings.event_store_kind == "postgresql"
    assert settings.nats_url is not None and settings.nats_url.startswith("nats://")
    assert settings.log_format == "json"


def test_the_unit_template_serves_its_instance() -> None:
    unit = (ROOT / "infra" / "systemd" / "rote@.service").read_text()
    assert re.search(r"^ExecStart=\S+/rote serve %i$", unit, re.MULTILINE)
    assert "EnvironmentFile=/etc/rote/rote.env" in unit


# --- which environment variables hold secrets ---------------------------------------------

SECRETS_INTRO = "An environment variable holds one when its name says so"


def secret_rule() -> tuple[dict[str, str], str]:
    """The kernel README's bullets on secret names (by their text before the first `:`),
    and the paragraph after them."""
    start = SECRETS_DOC.index(SECRETS_INTRO)
    bullets_start = SECRETS_DOC.index("\n\n* ", start) + 2
    bullets_end = SECRETS_DOC.index("\n\n", bullets_start)
    after_end = SECRETS_DOC.index("\n\n", bullets_end + 2)
    bullets = {}
    for bullet in SECRETS_DOC[bullets_start:bullets_end].removeprefix("* ").split("\n* "):
        head, _, body = bullet.partition(":")
        bullets[head] = " ".join(body.split())
    return bullets, " ".join(SECRETS_DOC[bullets_end:after_end].split())


def names(text: str) -> set[str]:
    return set(re.findall(r"`([A-Z][A-Z0-9_]*)`", text))


def test_the_readme_states_the_secret_name_rule_of_the_code() -> None:
    bullets, _ = secret_rule()
    assert set(bullets) == {
        f"masked from {MIN_SECRET_CHARS} characters",
        f"masked from {MIN_SCANNED_SECRET_CHARS} characters (names that only hint)",
        "never",
    }
    strong = bullets[f"masked from {MIN_SECRET_CHARS} characters"]
    hint = bullets[f"masked from {MIN_SCANNED_SECRET_CHARS} characters (names that only hint)"]
    never = bullets["never"]
    # Every word the code knows is in its bullet...
    suffixes = set(re.findall(r"[A-Z]+", secrets._SECRET_SUFFIX.pattern))
    assert names(strong) >= secrets._SECRET_WORDS | secrets._SECRET_LAST_WORDS | suffixes
    assert names(hint) >= secrets._HINT_LAST_WORDS | {"KEY"}
    assert names(never) >= secrets._NOT_SECRET | secrets._LOCATOR_WORDS
    # ...and every name or word a bullet gives is classified as it says, alone or as the
    # last word of a name.
    for text, floor in ((strong, MIN_SECRET_CHARS), (hint, MIN_SCANNED_SECRET_CHARS)):
        for name in names(text):
            assert floor in (secret_floor(name), secret_floor(f"X_{name}")), name
    for name in names(never):
        assert secret_floor(name) is None, name
    assert set(re.findall(r"`([a-z]+)`", never)) <= secrets._FLAGS
    assert f"a number of fewer than {MIN_SCANNED_SECRET_CHARS} digits" in never


def test_the_readme_states_what_else_is_masked() -> None:
    _, after = secret_rule()
    assert f"A value under {MIN_SCANNED_SECRET_CHARS} characters is masked only where" in after
    credentials = " and ".join(f"`{name}`" for name in secrets.CREDENTIAL_ENV)
    assert f"{credentials} are masked from {MIN_SECRET_CHARS} characters" in after
    query_names = set(secrets._QUERY_SECRET_NAMES.split("|"))
    listed = re.search(r"credential query parameters \(([^;)]*)", after)
    assert listed is not None
    documented = set(re.findall(r"`([a-z_-]+)`", listed.group(1)))
    assert documented and documented <= query_names
    assert f"also masked on its own, from {MIN_SCANNED_SECRET_CHARS} characters" in after


def test_the_infra_guide_refers_to_the_kernel_readme_for_secret_names() -> None:
    assert "\n## Secrets\n" in SECRETS_DOC
    start = README.index("Which variables count as secrets")
    paragraph = README[start : README.find("\n\n", start) % (len(README) + 1)]
    assert "(../services/kernel/README.md#secrets)" in paragraph
    assert not names(paragraph), "the rule is stated once, in services/kernel/README.md"


# --- commands, subjects and payloads the docs show ----------------------------------------

DOCS = {
    path.relative_to(ROOT).as_posix(): path.read_text()
    for path in [
        ROOT / "README.md",
        *sorted((ROOT / "infra").rglob("*.md")),
        *sorted((ROOT / "services").rglob("README.md")),
    ]
}
SERVICE_SOURCES = {
    path.parent.name: path.read_text() for path in (ROOT / "services").glob("*/service.py")
}


def endpoint_requests() -> dict[str, type[msgspec.Struct]]:
    """Every micro endpoint's subject and the contract its requests decode as, read from
    the services' `Endpoint(...)` registrations."""
    found = {}
    for source in SERVICE_SOURCES.values():
        for constant, request in re.findall(
            r'\(\s*"[a-z_]+",\s*(?:s|subjects)\.([A-Z_]+),\s*([A-Za-z]+)\b', source
        ):
            found[getattr(subjects, constant)] = CONTRACTS[request]
    return found


def test_every_endpoint_is_found_in_the_services() -> None:
    api = {v for v in vars(subjects).values() if isinstance(v, str) and v.startswith("rote.api.")}
    assert set(endpoint_requests()) == api


def documented_rote_commands() -> list[tuple[str, list[str], bool]]:
    """(doc, words, runnable) for every `rote ...` in backticks (a synopsis, maybe with
    [optional] parts, NAME placeholders and a|b choices: one entry per choice) and every
    shell line that runs rote (runnable as written)."""
    found: list[tuple[str, str, bool]] = []
    for doc, text in DOCS.items():
        found += [(doc, c, False) for c in re.findall(r"`(?:\S*/)?rote ([a-z][^`]*)`", text)]
        code = "\n".join(re.findall(r"```[a-z]*\n(.*?)```", text, re.DOTALL))
        code += "\n" + "\n".join(re.findall(r"^    \S.*$", text, re.MULTILINE))
        for line in code.splitlines():
            program = re.match(r"\s*(?:[A-Z_]+=\S*\s+)*(?:\S*/)?rote ([a-z].*)$", line)
            if program:
                found.append((doc, program.group(1).split(" #")[0].rstrip(" &"), True))
    commands = []
    for doc, command, runnable in found:
        # A synopsis in a code block (`rote infra streams DIR [--replicas N]`) is not run.
        runnable = runnable and not re.search(r"[\[\]|…]|\b[A-Z]+\b", command)
        words = command.replace("[", " ").replace("]", " ").split()
        choices = [i for i, w in enumerate(words) if re.fullmatch(r"[a-z]+(\|[a-z]+)+", w)]
        if choices:
            i = choices[0]
            commands += [
                (doc, [*words[:i], c, *words[i + 1 :]], False) for c in words[i].split("|")
            ]
        else:
            commands.append((doc, words, runnable))
    return commands


def _subcommand(words: list[str]) -> tuple[argparse.ArgumentParser, int]:
    """The parser of the longest sub-command path `words` starts with, and its length."""
    parser, depth = build_parser(), 0
    while depth < len(words):
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs or words[depth] not in subs[0].choices:
            break
        parser, depth = subs[0].choices[words[depth]], depth + 1
    return parser, depth


def test_every_documented_rote_command_exists_with_its_flags() -> None:
    commands = documented_rote_commands()
    assert sum(runnable for *_, runnable in commands) > 10
    for doc, words, runnable in commands:
        if not re.fullmatch(r"[a-z]+", words[0]):
            continue  # prose: "rote serve: ..." is a line rote prints
        parser, depth = _subcommand(words)
        assert depth >= 1, (doc, words)
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        assert not subs, (doc, words, "no such sub-command")
        flags = {s for action in parser._actions for s in action.option_strings}
        for flag in (w.split("=")[0] for w in words if w.startswith("--")):
            assert flag in flags, (doc, words, flag)
        if runnable:
            try:
                build_parser().parse_args(words)
            except SystemExit:
                raise AssertionError(f"{doc}: `rote {' '.join(words)}` does not parse") from None


def documented_subjects() -> set[str]:
    found = set()
    for text in DOCS.values():
        for subject in re.findall(r"\brote\.(?:api|intake)\.[a-z_]+\.[a-z_|]+", text):
            service_verb, _, verbs = subject.rpartition(".")
            found |= {f"{service_verb}.{verb}" for verb in verbs.split("|")}
    return found


def test_every_documented_subject_exists() -> None:
    endpoints = endpoint_requests()
    intake = {subjects.intake_task(verb) for verb in INTAKE_COMMANDS}
    documented = documented_subjects()
    assert len(documented) > 20
    assert documented <= set(endpoints) | intake, documented - set(endpoints) - intake
    streamed = set().union(*subjects.STREAM_SUBJECTS.values())
    for text in DOCS.values():
        for kind in re.findall(r"\brote\.evt\.([a-z_]+)\.", text):
            assert f"rote.evt.{kind}.>" in streamed, kind


def documented_payloads() -> list[tuple[str, str, str]]:
    """(doc, subject, JSON) for every `rote.api…`/`rote.intake…` followed by a payload."""
    return [
        (doc, subject, payload)
        for doc, text in DOCS.items()
        for subject, payload in re.findall(
            r"\b(rote\.(?:api|intake)\.[a-z_]+\.[a-z_]+)`?\s+'(\{[^']*\})'", text
        )
    ]


def test_every_documented_payload_decodes_as_its_contract() -> None:
    endpoints = endpoint_requests()
    payloads = documented_payloads()
    assert {subjects.RUNS_START, subjects.EXECUTORS_PIN, "rote.intake.tasks.pause"} <= {
        subject for _, subject, _ in payloads
    }
    for doc, subject, payload in payloads:
        if subject.startswith("rote.intake."):
            contract = INTAKE_COMMANDS[subject.rpartition(".")[2]]
        else:
            contract = endpoints[subject]
        # "…" stands for a value the reader fills in (a run_id).
        try:
            msgspec.json.decode(payload.replace("…", "x").encode(), type=contract)
        except msgspec.ValidationError as exc:
            raise AssertionError(f"{doc}: {subject} '{payload}': {exc}") from None


def test_every_documented_trigger_is_one_the_scheduler_takes() -> None:
    triggers = [
        (doc, found)
        for doc, text in DOCS.items()
        for found in re.findall(r'`(\{"kind":"[a-z]+"[^`]*\})`', text)
    ]
    assert any('"condition"' in found for _, found in triggers)
    for doc, found in triggers:
        try:
            validate(msgspec.json.decode(found.encode(), type=Trigger))
        except (msgspec.ValidationError, TriggerError) as exc:
            raise AssertionError(f"{doc}: {found}: {exc}") from None


def test_the_nats_micro_commands_name_rote_services() -> None:
    names = {
        n for src in SERVICE_SOURCES.values() for n in re.findall(r'name="(rote-[a-z]+)"', src)
    }
    assert {f"rote-{service}" for service in SERVICE_MODULES} == names
    for text in DOCS.values():
        for name in re.findall(r"nats\s+micro\s+(?:stats|info)\s+([^\s`)]+)", text):
            assert name in names, name
