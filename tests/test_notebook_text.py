"""The notebooks' prose: no control characters (a ``\\t`` or ``\\b`` typed into a Python string instead of
``\\text`` or ``\\beta``), and math that parses: balanced delimiters and braces, and only TeX commands MathJax
knows. Fast: reads the notebooks, executes nothing."""
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted(p for p in (ROOT / "notebooks").rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)

GREEK = ("alpha beta gamma delta epsilon varepsilon zeta eta theta vartheta iota kappa lambda mu nu xi pi varpi rho "
         "varrho sigma varsigma tau upsilon phi varphi chi psi omega Gamma Delta Theta Lambda Xi Pi Sigma Upsilon "
         "Phi Psi Omega")
TEX = GREEK + (
    " frac tfrac dfrac sqrt sum prod int min max arg argmin argmax inf sup lim log ln exp det operatorname"
    " text textstyle displaystyle mathrm mathbf mathbb mathcal mathit boldsymbol bar tilde hat widehat widetilde vec"
    " dot ddot overline underline underbrace overbrace left right big Big bigg Bigg middle"
    " cdot cdots ldots dots vdots ddots times div pm mp circ star ast bullet oplus otimes odot"
    " le leq ge geq ne neq approx equiv sim simeq propto ll gg in notin subset subseteq supset cup cap setminus"
    " to rightarrow leftarrow Rightarrow Leftarrow Leftrightarrow iff implies mapsto gets"
    " infty partial nabla ell forall exists emptyset top perp mid parallel"
    " langle rangle lceil rceil lfloor rfloor lvert rvert lVert rVert vert Vert"
    " quad qquad hspace vspace begin end tag label nonumber"
)
KNOWN = set(TEX.split())
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")  # every control character but tab is refused (tab: below)
MATH = re.compile(r"\$\$(.+?)\$\$|\$(.+?)\$", re.S)


def _markdown(path: Path):
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return [(i, "".join(c["source"])) for i, c in enumerate(cells) if c["cell_type"] == "markdown"]


def problems(text: str) -> list[str]:
    """What is wrong with one markdown cell's text (empty: nothing)."""
    found = [f"control character {ch!r} at {m.start()}" for m in CONTROL.finditer(text) for ch in [m.group()]]
    found += [f"tab at {m.start()}" for m in re.finditer("\t", text)]
    prose = re.sub(r"```.*?```|`[^`]*`", "", text, flags=re.S)  # code spans hold no math
    if (prose.count("$") - prose.count(r"\$")) % 2:
        found.append("an odd number of $ delimiters")
    for m in MATH.finditer(prose):
        tex = m.group(1) or m.group(2)
        depth = 0
        for ch in re.sub(r"\\[{}]", "", tex):
            depth += {"{": 1, "}": -1}.get(ch, 0)
            if depth < 0:
                break
        if depth:
            found.append(f"unbalanced braces in ${tex.strip()[:60]}$")
        found += [f"unknown TeX command \\{c} in ${tex.strip()[:60]}$"
                  for c in re.findall(r"\\([A-Za-z]+)", tex) if c not in KNOWN]
        if len(re.findall(r"\\left\b", tex)) != len(re.findall(r"\\right\b", tex)):
            found.append(f"\\left and \\right unpaired in ${tex.strip()[:60]}$")
    return found


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: str(p.relative_to(ROOT / "notebooks")))
def test_markdown_has_no_control_characters_and_its_math_parses(path):
    bad = {i: found for i, text in _markdown(path) if (found := problems(text))}
    assert not bad, f"{path.name}: markdown cells with problems: {bad}"


def test_the_check_finds_what_it_is_for():
    assert problems("$V_{\text{raw}}$")  # "\t" typed into a Python string: a tab
    assert problems("$\\gamma\x08eta$")  # "\b": a backspace
    assert problems("$\\frac{a}{b$") and problems("$x$ and $y") and problems("$\\nabal f$")
    assert not problems("$\\frac{a}{b}$, $$\\sum_i w_i \\|\\nabla f_i\\|^2$$ and `$HOME` costs \\$5")


def test_notebooks_declare_the_kernel_make_env_registers():
    from fedcompanion.reproduction.reproduce import KERNEL

    makefile = (ROOT / "Makefile").read_text()
    assert f"ipykernel install --sys-prefix --name {KERNEL}" in makefile
    declared = {p.name: json.loads(p.read_text(encoding="utf-8"))["metadata"]["kernelspec"]["name"] for p in NOTEBOOKS}
    assert set(declared.values()) == {KERNEL}, declared


def test_make_lab_starts_as_root_and_passes_options():
    import os
    import subprocess

    dry = subprocess.run(["make", "-n", "lab", "ARGS=--port 8899"], cwd=ROOT, capture_output=True, text=True).stdout
    line = next(x for x in dry.splitlines() if "jupyter lab" in x)
    assert line.endswith("--port 8899") and ("--allow-root" in line) == (os.geteuid() == 0)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: str(p.relative_to(ROOT / "notebooks")))
def test_every_exercise_says_what_it_costs(path):
    """Issue 46: a student should know before starting that an exercise reruns the slowest part of an hour-long
    sweep. Each numbered item of the notebook's Exercises section carries a ``*Cost: ...*``."""
    cells = ["".join(c["source"]) for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "markdown"]
    section = next((s[s.index("## Exercises"):] for s in cells if "## Exercises" in s), None)
    assert section is not None, "the notebook has no Exercises section"
    items = re.split(r"(?m)^(?=\d+\. )", section)[1:]
    assert items, "the Exercises section has no numbered exercise"
    for item in items:
        assert "*Cost:" in item, f"exercise without its cost: {item[:80]!r}"
