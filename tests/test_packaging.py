"""What the wheel installs: one import package, beside PyPI's `journal`, `replay` and `runtime`.

Those three names are real, unrelated PyPI projects. Before the wheel installed everything under
``agentteam_task_bridge``, either order of installation broke something: installed after us they
replaced our ``journal`` (``agentteam-replay`` failed on an ImportError, the demo exited 1);
installed before, we replaced theirs, and a later ``pip uninstall journal`` deleted our files.
Here both orders are installed into one fresh environment each, and both CLIs run the main job
(the demo) and read its journal; then PyPI's three are uninstalled and ours still runs.

The fresh environment is a venv without pip whose only packages are what these tests install;
the bridge's dependencies come from this test environment's site-packages through a ``.pth``
line (which adds the folder, not the editable install of this checkout: that needs its own
``.pth`` to run), so the test downloads three small sdists and nothing else.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
THEIRS = ("journal", "replay", "runtime")
pytestmark = pytest.mark.slow


def _pip(venv: Path, *args: str | Path) -> None:
    command = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python")]
    subprocess.run(
        [*command, "--disable-pip-version-check", "-q", *map(str, args)],
        check=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Path]]:
    """Our wheel, built from this checkout, and wheels of PyPI's three namesakes."""
    out = tmp_path_factory.mktemp("wheels")
    ours = out / "ours"
    build = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(ours), str(ROOT)]
    left = not (ROOT / "build").exists()  # setuptools builds in the tree: leave it as found
    try:
        subprocess.run(build, check=True, timeout=300, cwd=out)
    finally:
        if left:
            shutil.rmtree(ROOT / "build", ignore_errors=True)
    (wheel,) = ours.glob("*.whl")
    theirs = out / "theirs"
    fetch = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(theirs), *THEIRS]
    try:
        subprocess.run(fetch, check=True, timeout=300, cwd=out, capture_output=True)
    except subprocess.CalledProcessError as exc:  # no package index: nothing to install beside
        pytest.skip(f"PyPI's {', '.join(THEIRS)} could not be fetched: {exc.stderr[-300:]!r}")
    return wheel, sorted(theirs.glob("*.whl"))


def test_the_wheel_installs_one_top_level_package(wheels: tuple[Path, list[Path]]) -> None:
    wheel, _ = wheels
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/")[0] for name in names if ".dist-info/" not in name}
    assert top == {"agentteam_task_bridge"}
    for package in ("bridge", "journal", "replay", "runtime", "cli"):
        assert f"agentteam_task_bridge/{package}/__init__.py" in names


def _environment(root: Path) -> Path:
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = Path(sysconfig.get_path("purelib", vars={"base": str(venv), "platbase": str(venv)}))
    ours = {sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}
    (site / "dependencies.pth").write_text("".join(f"{path}\n" for path in sorted(ours)))
    return venv


def _run(venv: Path, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HOME": str(home), "XDG_DATA_HOME": str(home / "data")}
    env["XDG_CONFIG_HOME"] = str(home / "config")
    env.pop("PYTHONPATH", None)
    return subprocess.run(
        [str(venv / "bin" / args[0]), *args[1:]],
        cwd=home,  # not this checkout: its folders must not be what gets imported
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def _both_clis_work(venv: Path, home: Path) -> None:
    journal = home / "demo" / "journal.db"
    demo = _run(venv, home, "agentteam-bridge", "demo", "--journal", str(journal))
    assert demo.returncode == 0, demo.stdout[-2000:] + demo.stderr[-2000:]
    verify = _run(venv, home, "agentteam-replay", "verify", str(journal))
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert "OK" in verify.stdout
    where = _run(venv, home, "python", "-c", "import agentteam_task_bridge as p; print(p.__file__)")
    assert str(venv) in where.stdout, where  # the installed wheel, not this checkout


@pytest.mark.parametrize("order", ["ours-first", "theirs-first"])
def test_both_clis_run_beside_pypis_namesakes_in_either_order(
    wheels: tuple[Path, list[Path]], tmp_path: Path, order: str
) -> None:
    wheel, theirs = wheels
    venv = _environment(tmp_path)
    batches = [[wheel], theirs] if order == "ours-first" else [theirs, [wheel]]
    for batch in batches:
        _pip(venv, "install", "--no-deps", "--no-index", *batch)
    _both_clis_work(venv, tmp_path)
    # Theirs were not replaced either: each name is found in their files (found, not imported:
    # PyPI's `runtime` is Python 2 code), and none in ours.
    find = f"import importlib.util as u; print([u.find_spec(n).origin for n in {THEIRS!r}])"
    origins = _run(venv, tmp_path, "python", "-c", find)
    assert origins.returncode == 0, origins.stderr
    assert origins.stdout.count(str(venv)) == len(THEIRS), origins.stdout
    assert "agentteam_task_bridge" not in origins.stdout
    _pip(venv, "uninstall", "-y", *THEIRS)
    (tmp_path / "after-uninstall").mkdir()
    _both_clis_work(venv, tmp_path / "after-uninstall")


# --- the package page --------------------------------------------------------------------------

HOME_PAGE = "https://github.com/agentteam/agentteam-task-bridge"
PAGES = [ROOT / "README.md", ROOT / "tests" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_the_package_page_names_its_home_authors_and_urls() -> None:
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["authors"] and project["urls"]["Homepage"] == HOME_PAGE
    assert {"Documentation", "Source", "Issues"} <= set(project["urls"])


def test_every_readme_link_works_on_the_package_index() -> None:
    """The README is the package index's page, where a relative link leads nowhere: each link is
    absolute or an anchor, and each one into this repository names a file that exists."""
    import re

    links = re.findall(r"\]\(([^)\s]+)\)", (ROOT / "README.md").read_text())
    assert links
    for link in links:
        assert link.startswith(("https://", "http://", "#")), link
        if link.startswith(f"{HOME_PAGE}/blob/main/"):
            assert (ROOT / link.removeprefix(f"{HOME_PAGE}/blob/main/")).exists(), link
        raw = HOME_PAGE.replace("://github.com/", "://raw.githubusercontent.com/") + "/main/"
        if link.startswith(raw):  # an image, served as it is
            assert (ROOT / link.removeprefix(raw)).exists(), link


def test_no_page_shows_a_path_of_the_machine_it_was_written_on() -> None:
    # This checkout, its environment, its home and temp folders (an example such as a systemd
    # unit's /home/agentteam is no machine's).
    machine = {str(ROOT), sys.prefix, "/tmp/pytest-of", "/root/", "/work/", "/var/folders/"}
    machine |= {str(Path.home())} if len(Path.home().parts) > 1 else set()
    for page in PAGES:
        text = page.read_text()
        for path in machine:
            assert path not in text, (page.name, path)
