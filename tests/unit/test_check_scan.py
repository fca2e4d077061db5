"""``det-lightning check`` without running anything: the Determined names a project's code uses
that det_lightning refuses, the packages it imports that are missing, the configs a folder
holds, and a config that fails validation (all in this process: nothing is imported)."""

import pathlib
import textwrap

from det_lightning import compat
from det_lightning._runner import _check
from det_lightning._runner._check_scan import missing_packages, refused_names

REPO = pathlib.Path(__file__).resolve().parents[2]

CODE = """
import os
import determined as det
from determined import pytorch
from determined.pytorch import deepspeed, PyTorchTrial
import no_such_package_xyz.sub
import helpers                      # the project's own module
from . import relative_thing        # the project's own package

try:
    import optional_package_xyz     # handled when absent
except ImportError:
    optional_package_xyz = None


class Trial(PyTorchTrial):
    def __init__(self, context):
        self.env = det.EnvContext
        self.loader = pytorch.DataLoader
"""


def _project(tmp_path: pathlib.Path) -> pathlib.Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "model_def.py").write_text(CODE)
    (tmp_path / "helpers.py").write_text("import requests_missing_xyz\n")
    return tmp_path


def test_refused_names_with_where_and_what_to_use(tmp_path: pathlib.Path) -> None:
    found = refused_names(_project(tmp_path))
    assert [line.split(":")[0] for line in found] == [
        "determined.pytorch.deepspeed (model_def.py",
        "determined.EnvContext (model_def.py",
    ]
    assert "pytorch.init(strategy='deepspeed')" in found[0]
    assert found[1].startswith("determined.EnvContext (model_def.py:18): ")


def test_missing_packages_leave_out_the_project_the_stdlib_and_optional_imports(
    tmp_path: pathlib.Path,
) -> None:
    assert missing_packages(_project(tmp_path)) == [
        "requests_missing_xyz (helpers.py:1)",
        "no_such_package_xyz (model_def.py:6)",
    ]


def test_determined_projects_in_this_repository_use_nothing_refused() -> None:
    for folder in ("examples/mnist", "tests/fixtures/determined_project"):
        assert refused_names(REPO / folder) == [], folder
        assert missing_packages(REPO / folder) == [], folder
    for fixture in ("pytorch_no_op", "pytorch_identity"):
        assert refused_names(REPO / "tests/experiment/fixtures" / fixture) == []


def test_find_configs_takes_yaml_with_an_entrypoint(tmp_path: pathlib.Path) -> None:
    (tmp_path / "a.yaml").write_text("entrypoint: model_def:T\n")
    (tmp_path / "data.yaml").write_text("rows: 3\n")
    (tmp_path / "broken.yaml").write_text("entrypoint: [\n")
    (tmp_path / ".hidden").mkdir()
    (tmp_path / ".hidden" / "b.yaml").write_text("entrypoint: model_def:T\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "c.yml").write_text("entrypoint: python3 train.py\n")
    assert _check.find_configs(tmp_path) == [tmp_path / "a.yaml", tmp_path / "sub" / "c.yml"]
    assert [p.name for p in _check.find_configs(REPO / "examples")] == [
        "adaptive.yaml",
        "const.yaml",
    ]


def test_a_bad_config_fails_its_project_and_the_table_says_why(
    tmp_path: pathlib.Path, capsys: object
) -> None:
    project = _project(tmp_path / "project")
    (project / "bad.yaml").write_text(
        textwrap.dedent(
            """\
            entrypoint: model_def:Trial
            searcher: {name: single, metric: loss, max_lenght: {batches: 1}}
            """
        )
    )
    report = _check.check_config(project / "bad.yaml", tmp_path / "scratch", smoke=True)
    assert not report.ok and report.smoke == "-"
    assert len(report.problems) == 1  # the schema's own message
    assert report.problems[0].startswith("config: searcher.max_lenght: unknown key. Did you mean")
    table = _check.format_table([report], tmp_path)
    assert table.splitlines()[1].split() == ["project/bad.yaml", "FAIL", "0", "0", "0", "-"]
    assert "  config: searcher.max_lenght: unknown key" in table
    assert not compat.is_installed()


def test_nothing_to_check_is_a_usage_error(tmp_path: pathlib.Path, capsys: object) -> None:
    assert _check.run_check([str(tmp_path)], smoke=False) == 2


def test_a_config_is_checked_for_what_its_entrypoint_reaches(tmp_path: pathlib.Path) -> None:
    """Determined's core_api_pytorch_mnist holds several scripts; only model_def.py imports
    torchvision. A config whose entrypoint is another script that imports none of it is not
    failed for torchvision (a new-user audit found every config failed). What the entrypoint
    imports from the project, packages and relative imports included, still counts."""
    (tmp_path / "model_def.py").write_text("import torchvision_missing_xyz\n")
    (tmp_path / "model_def_adaptive.py").write_text(
        "import helpers\nfrom pkg import layers\n\ndef main():\n    import lazy\n"
    )
    (tmp_path / "helpers.py").write_text("import helpers_dep_missing_xyz\n")
    (tmp_path / "lazy.py").write_text("import lazy_dep_missing_xyz\n")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "layers.py").write_text("from . import blocks\n")
    (tmp_path / "pkg" / "blocks.py").write_text("import blocks_dep_missing_xyz\n")
    for name, entrypoint in [
        ("const.yaml", "python3 model_def.py --epochs 1"),
        ("adaptive.yaml", "python3 model_def_adaptive.py --epochs 1"),
    ]:
        (tmp_path / name).write_text(
            f"entrypoint: {entrypoint}\n"
            "hyperparameters: {global_batch_size: 8}\n"
            "searcher: {name: single, metric: loss, max_length: {batches: 1}}\n"
        )
    reports = {
        r.config.name: sorted(m.split(" ")[0] for m in r.missing)
        for r in (
            _check.check_config(tmp_path / name, tmp_path / "scratch", smoke=False)
            for name in ("const.yaml", "adaptive.yaml")
        )
    }
    assert reports == {
        "const.yaml": ["torchvision_missing_xyz"],
        "adaptive.yaml": [
            "blocks_dep_missing_xyz",
            "helpers_dep_missing_xyz",
            "lazy_dep_missing_xyz",
        ],
    }


def test_a_core_api_loop_is_told_from_a_trainer_script(tmp_path: pathlib.Path) -> None:
    """``check`` smoke-runs Trainer code in test mode; a Core API loop has none."""
    from det_lightning._runner._check_scan import core_api_loop

    loops = {
        "core.py": "import determined as det\nwith det.core.init() as c:\n    pass\n",
        "core_from.py": "from determined import core\nwith core.init() as c:\n    pass\n",
        "trainer.py": (
            "import determined as det\nfrom determined import pytorch\n"
            "with det.core.init() as c, pytorch.init() as ctx:\n    pytorch.Trainer\n"
        ),
        "plain.py": "import determined as det\nprint(det.get_cluster_info())\n",
    }
    seen = {}
    for name, code in loops.items():
        (tmp_path / name).write_text(code)
        seen[name] = core_api_loop(tmp_path, [tmp_path / name])
    assert seen == {"core.py": True, "core_from.py": True, "trainer.py": False, "plain.py": False}


def test_a_config_named_and_found_in_its_folder_is_checked_once(tmp_path: pathlib.Path) -> None:
    (tmp_path / "a.yaml").write_text("entrypoint: python3 train.py\n")
    assert _check.configs_to_check([str(tmp_path / "a.yaml"), str(tmp_path)]) == [
        (tmp_path / "a.yaml").resolve()
    ]
