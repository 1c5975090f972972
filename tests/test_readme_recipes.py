"""The README's *How to make a dump* recipes are the configurations that made the committed dumps,
and the reference pages list what the code has.

- MindSpore: the README's dump.json is tests/data/ms210/nan_log/dump.json, and the copy MindSpore
  kept of the config in the dump it wrote (`.dump_metadata/data_dump.json`), but for `path`.
- msprobe: the README's config.json is the one tests/writers/msprobe_dumps.py gave msprobe 26.2 for
  tests/data/msprobe/pt_mix_tensor (but for `dump_path`), and the debugger calls it shows are the
  ones that script makes.
- TorchAir: no Ascend machine made a GE dump here, so the README's options are checked against
  TorchAir's documented ones (`torchair/configs/dump_config.py`, copied below) and its layout against
  the committed GE trees written from that documentation.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shlex

from catalog.views import USER_VIEWS
from ingest.pipeline import detect_dump
from ingest.readers.registry import built_in_names
from tests.conftest import REPO

ROOT = REPO
README = (ROOT / "README.md").read_text(encoding="utf-8")
DATA = ROOT / "tests" / "data"


def section(text: str, heading: str) -> str:
    """The text under `heading` (a whole heading line), up to the next heading of its level or above."""
    level = heading.split(" ")[0]
    start = text.index(f"\n{heading}\n") + len(heading) + 2
    ends = [m.start() for m in re.finditer(r"^(#+) ", text[start:], re.M) if len(m.group(1)) <= len(level)]
    return text[start : start + ends[0]] if ends else text[start:]


def fenced(text: str, lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```$", text, re.M | re.S)


def ingest_dirs(text: str) -> list[str]:
    """The dump folders of the indented `dumpcat ingest` commands of a recipe."""
    out = []
    for m in re.finditer(r"^    dumpcat ingest (.*)$", text, re.M):
        args = shlex.split(re.split(r"\s{2,}#", m.group(1))[0])
        out.append(args[0])
    return out


MINDSPORE = section(README, "### MindSpore (graph mode)")
MSPROBE = section(README, "### msprobe (PyTorch)")
TORCHAIR = section(README, "### TorchAir / GE (Ascend)")


def test_mindspore_recipe_is_the_config_of_the_demo_dump():
    (shown,) = fenced(MINDSPORE, "json")
    shown = json.loads(shown)
    committed = json.loads((DATA / "ms210/nan_log/dump.json").read_text())
    kept = json.loads((DATA / "ms210/nan_log/dump/rank_0/.dump_metadata/data_dump.json").read_text())
    path = shown["common_dump_settings"].pop("path")
    for config in (committed, kept):
        config["common_dump_settings"].pop("path")
        assert shown == config
    # The environment variable, the mode and the folder to ingest are the ones that made it.
    assert "export MINDSPORE_DUMP_CONFIG=$PWD/dump.json" in MINDSPORE
    assert "MINDSPORE_DUMP_CONFIG=$PWD/dump.json" in (DATA / "ms210/README.md").read_text()
    assert "ms.set_context(mode=ms.GRAPH_MODE" in MINDSPORE
    assert "ms.set_context(mode=ms.GRAPH_MODE" in (DATA / "ms210/nan_log/train.py").read_text()
    assert ingest_dirs(MINDSPORE) == [path]  # MindSpore writes `path`/rank_N/: the dump's root
    assert (DATA / "ms210/nan_log/dump/rank_0").is_dir()
    assert detect_dump(DATA / "ms210/nan_log/dump").reader.name == "mindspore-npy"


def _msprobe_writer():
    spec = importlib.util.spec_from_file_location("msprobe_dumps", ROOT / "tests/writers/msprobe_dumps.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # standard library only at import: torch is imported by its workers
    return module


def test_msprobe_recipe_is_the_config_that_made_pt_mix_tensor():
    (shown,) = fenced(MSPROBE, "json")
    shown = json.loads(shown)
    writer = _msprobe_writer()
    config, _world_size, _ = writer.TREES["pt_mix_tensor"]
    dump_path = shown.pop("dump_path")  # the script sets it to the tree's folder
    assert shown == config
    assert ingest_dirs(MSPROBE) == [dump_path]
    # What msprobe wrote is that config's: its task and level, one folder per step listed.
    tree = DATA / "msprobe/pt_mix_tensor"
    dump = json.loads((tree / "step0/rank0/dump.json").read_text())
    assert (dump["task"], dump["level"]) == (config["task"], config["level"])
    assert sorted(p.name for p in tree.iterdir()) == [f"step{s}" for s in config["step"]]
    assert any((tree / "step0/rank0/dump_tensor_data").iterdir())  # task "tensor": the tensors
    assert detect_dump(tree).reader.name == "msprobe"
    # The debugger is driven as the script that made the tree drives it.
    (code,) = fenced(MSPROBE, "python")
    script = (ROOT / "tests/writers/msprobe_dumps.py").read_text()
    calls = [
        "from msprobe.pytorch import PrecisionDebugger",
        "PrecisionDebugger(config_path=",
        "debugger.start(model=model)",
        "debugger.stop()",
        "debugger.step()",
    ]
    for call in calls:
        assert call in code and call in script, call
    order = [code.index(call) for call in calls[1:]]
    assert order == sorted(order) and [script.index(call) for call in calls[1:]] == sorted(
        script.index(call) for call in calls[1:]
    )


# TorchAir's documented dump options and the values each takes (TorchAir
# python/torchair/configs/dump_config.py: OptionValue / RegexValue / MustExistedPathValue).
TORCHAIR_OPTIONS = {
    "enable_dump": {"True", "False"},
    "dump_path": None,  # an existing folder
    "dump_mode": {'"input"', '"output"', '"all"'},
    "quant_dumpable": {"True", "False"},
    "dump_step": None,  # "0|1|2-5|6"
    "dump_layer": None,  # "Mul_1 Add1 Conv2D_1"
    "dump_data": {'"tensor"', '"stats"'},
    "dump_config_path": None,  # an acl.json-style file
    "data_dump_stage": {'"original"', '"optimized"'},
}


def test_torchair_recipe_uses_documented_options_and_the_layout_of_the_ge_trees():
    (code,) = fenced(TORCHAIR, "python")
    set_options = dict(re.findall(r"^config\.dump_config\.(\w+) = (.+?)(?:\s+#.*)?$", code, re.M))
    assert set_options["enable_dump"] == "True"
    for name, value in set_options.items():
        assert name in TORCHAIR_OPTIONS, name
        allowed = TORCHAIR_OPTIONS[name]
        assert allowed is None or value in allowed, (name, value)
    # Every value the comments offer is a documented one.
    for name, comment in re.findall(r"^config\.dump_config\.(\w+) = .+?#(.*)$", code, re.M):
        for offered in re.findall(r'"\w+"', comment):
            assert offered in TORCHAIR_OPTIONS[name], (name, offered)
    assert "torchair.get_npu_backend(compiler_config=config)" in code
    # The folder to ingest is dump_path; GE writes worldsize{N}_global_rank{R}/... right under it, as
    # in the committed trees: raw tensors with dump_data "tensor", one CSV per operator with "stats".
    assert ingest_dirs(TORCHAIR) == [json.loads(set_options["dump_path"])]
    assert "`worldsize{N}_global_rank{R}/{time}/{device}/{model}/{model_id}/{step}/`" in TORCHAIR
    for tree, suffix in (("ge_tensor", ""), ("ge_stats", ".csv")):
        root = DATA / "ge" / tree
        assert all(re.fullmatch(r"worldsize\d+_global_rank\d+", p.name) for p in root.iterdir()), tree
        leaves = [p for p in root.rglob("*") if p.is_file()]
        assert leaves and all(p.parent.relative_to(root).parts.__len__() == 6 for p in leaves), tree
        if suffix:
            assert all(p.suffix == suffix for p in leaves), tree
        else:
            assert not any(p.suffix == ".csv" for p in leaves), tree
        assert detect_dump(root).reader.name == "ge"


def test_readme_and_ci_run_the_same_test_command():
    """The README's test command is the one `.ci/run` ends with."""
    setup = section(README, "## Set up on a fresh machine")
    install = next(ln for ln in setup.splitlines() if ln.startswith("    apt-get update && "))
    readme_command = install.rsplit("&&", 1)[1].strip()
    ci = [ln for ln in (ROOT / ".ci/run").read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    assert ci[-1].strip() == readme_command == "python -m pytest -q -n 2 --dist loadfile"


def test_readme_view_table_lists_every_view():
    table = section(README, "## The views")
    listed = set(re.findall(r"^\| (`[^|]+`) \|", table, re.M))
    names = {name for cell in listed for name in re.findall(r"`(\w+)`", cell)}
    assert set(USER_VIEWS) | {"overflows"} <= names, set(USER_VIEWS) - names
    views_doc = (ROOT / "docs/views.md").read_text(encoding="utf-8")
    for name in names:
        assert f"## `{name}`" in views_doc, name


def test_docs_list_every_producer():
    """docs/producers.md has a row per `--producer` value, and docs/cli.md names them all."""
    producers = (ROOT / "docs/producers.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `([\w.-]+)`:", producers, re.M)
    assert sorted(rows) == sorted(built_in_names())
    cli = section((ROOT / "docs/cli.md").read_text(encoding="utf-8"), "## dumpcat ingest")
    option = re.search(r"^- `--producer NAME`:(.*?)(?=^- )", cli, re.M | re.S).group(1)
    assert re.findall(r"`([\w.-]+)`", option) == built_in_names()


def test_relative_links_of_the_docs_resolve():
    """Every relative link of the README, CONTRIBUTING.md and docs/*.md names a file that exists,
    and every `#anchor` one of that page's headings."""
    pages = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]
    for page in pages:
        text = page.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"https?:|mailto:", target):
                continue
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            assert linked.exists(), (page.name, target)
            if anchor and linked.suffix == ".md":
                assert anchor in _anchors(linked.read_text(encoding="utf-8")), (page.name, target)


def _anchors(text: str) -> set[str]:
    """GitHub's anchors of a page's headings: lower case, punctuation dropped, spaces to hyphens."""
    out = set()
    for heading in re.findall(r"^#+ (.*)$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        out.add(slug)
    return out
