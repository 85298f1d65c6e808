"""The README and the docs pages (docs/*.md): the README stays a front door (at most 200 lines, CI's test command
in it verbatim), every relative link and image resolves (an ``#anchor`` to a heading of its target, by GitHub's
slug rule), every ``python -m amortized_pyro ...`` line of a code block names a subcommand and options the CLI
has, and every ``experiments/...`` or ``bench/...`` path they name exists."""
import os
import re
import shlex
from pathlib import Path
from urllib.parse import unquote

import click
import pytest

from amortized_pyro import fit
from amortized_pyro.cli.commands import cli
from fresh_python import FreshPython

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README] + sorted((ROOT / "docs").glob("*.md"))
README_LINES = 200

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
HEADING = re.compile(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$")
INLINE_CODE = re.compile(r"`[^`]*`")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)")
REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.M)
HTML_TARGET = re.compile(r"<(?:a|img)\b[^>]*?\b(?:href|src)\s*=\s*[\"']([^\"']+)[\"']", re.I)
HTML_ID = re.compile(r"<[a-z][^>]*?\b(?:id|name)\s*=\s*[\"']([^\"']+)[\"']", re.I)
SCHEME = re.compile(r"^(?:[a-z][a-z0-9+.-]*:|//)", re.I)
REPO_PATH = re.compile(r"(?<![\w./-])((?:experiments|bench)/[\w./-]*\w)")
OPERATORS = {"&&", "||", ";", "|", "&", "(", ")"}


def split_page(text):
    """(the page's prose with every fenced block blanked, [each fenced block's lines])."""
    prose, blocks, fence = [], [], None
    for line in text.splitlines():
        match = FENCE.match(line)
        if fence is None and match:
            fence, block = match.group(1), []
            prose.append("")
        elif fence is not None and match and match.group(1)[0] == fence[0] and len(match.group(1)) >= len(fence) \
                and not line.strip()[len(match.group(1)):].strip():
            blocks.append(block)
            fence = None
            prose.append("")
        elif fence is not None:
            block.append(line)
            prose.append("")
        else:
            prose.append(line)
    assert fence is None, "a code fence is never closed"
    return "\n".join(prose), blocks


def slug(heading):
    """GitHub's anchor of a heading: its rendered text lowercased, every character other than a letter, a digit,
    a space, '-' or '_' dropped, spaces to '-'."""
    text = re.sub(r"!\[[^\]]*\]\([^)]*\)", "", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


def anchors(path):
    """Every anchor a page has: its headings' slugs (a repeated one numbered -1, -2, ... as GitHub does) and the
    ids of its HTML elements."""
    prose, _ = split_page(path.read_text(encoding="utf-8"))
    found, seen = set(), {}
    for line in prose.splitlines():
        match = HEADING.match(line)
        if match:
            base = slug(match.group(1))
            found.add(base if base not in seen else "%s-%d" % (base, seen[base]))
            seen[base] = seen.get(base, 0) + 1
    return found | set(HTML_ID.findall(prose))


def links(path):
    """The relative targets of a page's links and images, outside code: (target, the page's line)."""
    prose, _ = split_page(path.read_text(encoding="utf-8"))
    prose = INLINE_CODE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), prose)  # keeps the line numbers
    found = []
    for pattern in (LINK, REFERENCE, HTML_TARGET):
        for match in pattern.finditer(prose):
            target = match.group(1)
            if not SCHEME.match(target):
                found.append((target, prose.count("\n", 0, match.start()) + 1))
    return found


def test_readme_is_a_front_door():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_LINES, "README.md has %d lines, more than %d: move the detail to docs/" % (
        len(lines), README_LINES)


def test_readme_keeps_cis_test_command_verbatim():
    """.ci/run runs 'the README's test command, verbatim': the README must show that very line."""
    ci = [line for line in (ROOT / ".ci" / "run").read_text().splitlines()
          if "pytest" in line and not line.lstrip().startswith("#")]
    assert len(ci) == 1, ci
    assert ci[0] in README.read_text(encoding="utf-8").splitlines(), ci[0]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    problems = []
    for target, line in links(page):
        path, _, anchor = unquote(target).partition("#")
        destination = (page.parent / path).resolve() if path else page
        where = "%s:%d: %s" % (page.relative_to(ROOT), line, target)
        if not destination.exists():
            problems.append(where + " (no such file)")
        elif anchor and destination.suffix == ".md" and anchor not in anchors(destination):
            problems.append(where + " (no heading with that anchor in %s)" % destination.name)
    assert not problems, "\n".join(problems)


def commands(page):
    """Every ``python -m amortized_pyro ...`` command in a page's code blocks, as its tokens after the module
    name, with the line it starts on (continuation lines joined, comments dropped, shell operators split)."""
    found = []
    for block in split_page(page.read_text(encoding="utf-8"))[1]:
        joined, buffer = [], ""
        for line in block:
            buffer += line[:-1] + " " if line.endswith("\\") else line
            if not line.endswith("\\"):
                joined.append(buffer)
                buffer = ""
        for line in joined:
            if "amortized_pyro" not in line or not re.search(r"\bpython3?\s+-m\s+amortized_pyro\b", line):
                continue
            lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
            lexer.whitespace_split = True
            tokens = list(lexer)
            segment = []
            for token in tokens + [";"]:
                if token in OPERATORS:
                    for i in range(len(segment) - 2):
                        if segment[i] in ("python", "python3") and segment[i + 1:i + 3] == ["-m", "amortized_pyro"]:
                            found.append((segment[i + 3:], line.strip()))
                    segment = []
                else:
                    segment.append(token)
    return found


def options_of(command):
    """{option string: its click parameter} for a command, its help option included."""
    context = click.Context(command)
    return {opt: param for param in command.get_params(context) if isinstance(param, click.Option)
            for opt in param.opts + param.secondary_opts}


def is_option(token):
    return token.startswith("-") and token != "-" and not re.match(r"^-\d", token)


def placeholder(value):
    """A value standing for one the reader picks: FOLDER, RUN_DIR, ..., a|b alternatives."""
    return "..." in value or "|" in value or bool(re.fullmatch(r"[A-Z][A-Z0-9_]*", value))


def problems_of(args):
    """What is wrong with ``python -m amortized_pyro ARGS``: an unknown subcommand or option, a choice the
    option does not offer, more arguments than the command takes. Arguments may be placeholders; options not."""
    problems, group_options, at = [], options_of(cli), 0
    while at < len(args) and is_option(args[at]):
        if args[at].split("=", 1)[0] not in group_options:
            problems.append("%s is not an option of amortized_pyro (before the subcommand)" % args[at])
        at += 1
    if at == len(args):
        return problems if any(a.split("=", 1)[0] in ("--help", "-h") for a in args) else problems + ["no subcommand"]
    name, rest = args[at], args[at + 1:]
    if name not in cli.commands:
        return problems + ["%s is not a subcommand (%s)" % (name, ", ".join(sorted(cli.commands)))]
    command = cli.commands[name]
    options, positional, i = options_of(command), [], 0
    while i < len(rest):
        token = rest[i]
        if token == "--":
            positional.extend(rest[i + 1:])
            break
        if not is_option(token):
            positional.append(token)
            i += 1
            continue
        option, has_value, value = token.partition("=")
        param = options.get(option)
        if param is None:
            problems.append("%s is not an option of %s" % (option, name))
            i += 1
            continue
        takes_value = not (param.is_flag or param.count)
        if takes_value and not has_value:
            value = rest[i + 1] if i + 1 < len(rest) else None
            i += 1
        i += 1
        if takes_value and value is None:
            problems.append("%s of %s needs a value" % (option, name))
        elif takes_value and isinstance(param.type, click.Choice) and not placeholder(value) \
                and value not in param.type.choices:
            problems.append("%s %s: not one of %s" % (option, value, ", ".join(param.type.choices)))
    arguments = [p for p in command.params if isinstance(p, click.Argument)]
    elided = "..." in positional
    if not elided and not any(p.nargs == -1 for p in arguments) and len(positional) > sum(p.nargs for p in arguments):
        problems.append("%s takes %d argument(s), given %s" % (name, sum(p.nargs for p in arguments), positional))
    if not elided and not any(a.split("=", 1)[0] in ("--help", "-h") for a in rest):
        required = sum(max(p.nargs, 1) for p in arguments if p.required)
        if len(positional) < required:
            problems.append("%s needs %d argument(s), given %s" % (name, required, positional))
    return problems


def test_commands_in_code_blocks_are_ones_the_cli_accepts():
    shown, problems = 0, []
    for page in PAGES:
        for args, line in commands(page):
            shown += 1
            problems.extend("%s: %s\n    %s" % (page.relative_to(ROOT), problem, line) for problem in problems_of(args))
    assert shown >= 10, "found only %d commands: is the parser still reading the pages?" % shown
    assert not problems, "\n".join(problems)


def test_the_command_checker_refuses_bad_commands():
    assert not problems_of(["fit", "--guide", "amortized", "--width", "128"])
    assert not problems_of(["--debug", "gap", "RUN_DIR", "--split", "test", "--n-images", "100"])
    assert not problems_of(["compare", "...", "--gap-images", "100"])
    assert problems_of(["fitt", "--guide", "amortized"])
    assert problems_of(["fit", "--no-such-option", "1"])
    assert problems_of(["fit", "--guide", "no-such-guide"])
    assert problems_of(["gap-report", "FOLDER", "ANOTHER"])
    assert problems_of(["gap", "--split", "test"])  # RUN_DIR missing


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_named_experiment_and_bench_paths_exist(page):
    text = page.read_text(encoding="utf-8")
    missing = sorted({path for path in REPO_PATH.findall(text) if not (ROOT / path).exists()})
    assert not missing, "%s names paths that do not exist: %s" % (page.relative_to(ROOT), ", ".join(missing))


def parsed(args):
    """``python -m amortized_pyro ARGS`` parsed by click itself, as the command line would be (the group's options,
    then the subcommand's: types, choices, counts of arguments and callbacks), without running the command: the
    contexts made, or the click error. Each path a path parameter must find (a run folder, a results file) is
    made first, empty, under the current folder, so that a placeholder or an example path stands for one that
    exists; '...' (arguments left out) is dropped."""
    args = [a for a in args if a != "..."]
    contexts = []
    try:
        group = cli.make_context("amortized_pyro", list(args))
        contexts.append(group)
        name, command, rest = cli.resolve_command(group, group._protected_args + group.args)
        make_paths(command, rest)
        contexts.append(command.make_context(name, rest, parent=group))
    except click.exceptions.Exit:  # --help: printed, and nothing run
        pass
    return contexts


def make_paths(command, args):
    """Make, empty, every relative path ``args`` give a parameter of ``command`` whose type wants it to exist."""
    context = click.Context(command, resilient_parsing=True)
    values = command.make_parser(context).parse_args(list(args))[0]  # {parameter: its raw value(s)}
    for param in command.params:
        given = values.get(param.name)
        for value in given if isinstance(given, (list, tuple)) else [given] if given is not None else []:
            make_path(param.type, value)


def make_path(kind, value):
    if isinstance(kind, click.Path) and kind.exists and not Path(value).is_absolute() and not Path(value).exists():
        if kind.dir_okay:
            Path(value).mkdir(parents=True)
        else:
            Path(value).parent.mkdir(parents=True, exist_ok=True)
            Path(value).touch()


def test_cli_page_commands_parse_with_click(tmp_path, monkeypatch):
    """Every ``python -m amortized_pyro ...`` of docs/cli.md (and of every other page) parsed by click's own
    ``make_context``, the group's and the subcommand's, in an empty folder (with experiments/ for the presets):
    every option exists, takes what it is given and accepts the value shown; nothing is run."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "experiments").symlink_to(ROOT / "experiments")
    shown, problems = {}, []
    for page in PAGES:
        for args, line in commands(page):
            shown[page.name] = shown.get(page.name, 0) + 1
            try:
                parsed(args)
            except click.ClickException as error:
                problems.append("%s: %s\n    %s" % (page.relative_to(ROOT), error.format_message(), line))
    assert shown.get("cli.md", 0) >= 8, "found only %s commands in docs/cli.md" % shown.get("cli.md", 0)
    assert not problems, "\n".join(problems)


def test_click_parsing_refuses_what_the_cli_refuses(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert len(parsed(["fit", "--guide", "amortized", "--width", "128"])) == 2
    assert len(parsed(["gap", "RUN_DIR", "--split", "test"])) == 2  # RUN_DIR made: it stands for a run folder
    for bad in (["fit", "--no-such-option", "1"], ["fit", "--guide", "no-such-guide"], ["fitt"],
                ["gap", "--split", "test"], ["gap-report", "FOLDER", "ANOTHER"], ["fit", "--width", "many"]):
        with pytest.raises(click.ClickException):
            parsed(bad)


OUT = re.compile(r"\bout=[\"']([^\"']+)[\"']")  # a run folder a block writes, fit(..., out="runs/a-vi")
NOT_RUN = re.compile(r"^\s*<!--\s*not run:\s*(.*?)\s*-->\s*$")
# Pages whose blocks are one notebook's cells, run in order (not alone) by their own test
NOTEBOOK_PAGES = {"docs/your-model.md": "a notebook page: its blocks run in order, as docs/your-model.ipynb, in "
                                        "tests/test_your_model_page.py"}
# Pages another piece of work owns, whose blocks do not run alone yet: reported to it, expected to fail until fixed
BLOCK_SECONDS = 120


def python_blocks(page):
    """[(the fence's line, the block's code, why it is not run or None)] of a page's ```python blocks; a block is
    not run where the line just before its fence is ``<!-- not run: why -->``."""
    lines, found, at = page.read_text(encoding="utf-8").splitlines(), [], 0
    while at < len(lines):
        match = FENCE.match(lines[at])
        if not match:
            at += 1
            continue
        end = next(i for i in range(at + 1, len(lines)) if lines[i].strip() == match.group(1))
        if lines[at].strip()[len(match.group(1)):].strip() == "python":
            why = NOT_RUN.match(lines[at - 1]) if at else None
            found.append((at + 1, "\n".join(lines[at + 1:end]) + "\n", why.group(1) if why else None))
        at = end + 1
    return found


BLOCKS = [pytest.param(page, code, why, id="%s:%d" % (page.relative_to(ROOT), line))
          for page in PAGES for line, code, why in python_blocks(page)]


def test_every_python_block_is_found_and_every_skip_says_why():
    assert len(BLOCKS) >= 10, "found only %d python blocks: is the parser still reading the pages?" % len(BLOCKS)
    assert all(why for _, _, why in (b.values for b in BLOCKS) if why is not None), "a not-run marker without a reason"


@pytest.fixture(scope="module")
def fresh_python():
    """New Python processes for the blocks, forked from one that imported torch, Pyro and the other third-party
    libraries once (tests/fresh_python.py: each block's own imports of the package run in its process), in the
    environment a block runs in: one torch thread, matplotlib's Agg."""
    server = FreshPython(dict(os.environ, OMP_NUM_THREADS="1", MPLBACKEND="Agg"))
    yield server
    server.close()


@pytest.mark.parametrize("page, code, why", BLOCKS)
def test_python_block_runs_alone(page, code, why, tmp_path, fresh_python):
    """Each ```python block of the README and docs/*.md, alone in a fresh Python process (one forked from a process
    that imported only third-party libraries: the fresh_python fixture), in an empty folder (with
    experiments/ for the presets; a block writing runs/... writes there): it must run to its end. A block marked
    ``<!-- not run: why -->`` (a finished run, a GPU, a network) is skipped, its reason reported."""
    name = str(page.relative_to(ROOT))
    if why is not None:
        pytest.skip("%s: not run: %s" % (name, why))
    if name in NOTEBOOK_PAGES:
        pytest.skip("%s: not run alone: %s" % (name, NOTEBOOK_PAGES[name]))
    (tmp_path / "experiments").symlink_to(ROOT / "experiments")
    (tmp_path / "block.py").write_text(code)
    # the README's and the API page's blocks that write a run (out=) must run again (issue 71: RunExists): each runs
    # where a finished run already sits in its out= folders, as its own first run leaves one (a small one, made
    # here: one run of the block instead of two)
    again = "out=" in code and name in ("README.md", "docs/python-api.md")
    assert not again or OUT.findall(code), "%s: a block's out= is not a quoted folder this test can read" % name
    for out in OUT.findall(code) if again else ():
        fit(guide="amortized", dataset="mnist-sample", n_obs=20, n_test=10, epochs=1, hidden=8, z_dim=2, width=4,
            predictive_draws=2, progress=False, log=lambda line: None, out=tmp_path / out)
    result = fresh_python.run(tmp_path / "block.py", timeout=BLOCK_SECONDS)
    assert result.returncode == 0, "%s does not run alone:\n%s" % (name, result.stderr[-3000:])
    # Pyro's INFO line where an ELBO guesses its plates: noise a reader copies (issue 71)
    assert "Guessed max_plate_nesting" not in result.stderr, name
