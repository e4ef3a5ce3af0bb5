"""scripts/check-layers: the layer check of `make layers` fails on what it is for.

Each case copies the built objects (and the docs' layer table) to a temporary tree,
adds one object or edits the table, and runs the check on it: a call that goes up a
layer, a call across folders the table does not allow, a cycle among the rows and a
folder without a row must each fail; the build as it is, and the tool calling a libc
function that libshunt.so also wraps, must pass.
"""

import shutil
import subprocess

from shunttest import REPO, build_dir

CHECK = REPO / "scripts" / "check-layers"


def tree(tmp_path):
    """A copy of build/obj, src/ (its folders) and docs/architecture.md."""
    b = build_dir()
    shutil.copytree(b / "obj", tmp_path / "build" / "obj")
    shutil.copytree(REPO / "src", tmp_path / "src")
    (tmp_path / "docs").mkdir()
    shutil.copy(REPO / "docs" / "architecture.md", tmp_path / "docs" / "architecture.md")
    return tmp_path


def add_object(root, folder, name, code):
    """Compiles code into build/obj/<folder>/<name>.o (and a source beside it in src/)."""
    src = root / "src" / folder / (name + ".c")
    src.write_text(code)
    obj = root / "build" / "obj" / folder / (name + ".o")
    obj.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["cc", "-c", "-o", str(obj), str(src)], check=True)


def check(root):
    r = subprocess.run([str(CHECK), "--build", str(root / "build"), "--src", str(root / "src"),
                        "--doc", str(root / "docs" / "architecture.md")],
                       capture_output=True, text=True, timeout=120)
    return r.returncode, r.stdout + r.stderr


def test_the_build_passes(tmp_path):
    code, out = check(tree(tmp_path))
    assert code == 0, out
    assert "0 problems" in out


def test_a_call_up_a_layer_fails(tmp_path):
    root = tree(tmp_path)
    # the transport calling the fd table (core/fd), two layers above it
    add_object(root, "transport", "upward", "int fdt_get(int);\nint upward(int fd) { return fdt_get(fd); }\n")
    code, out = check(root)
    assert code == 1, out
    assert "transport/upward.o uses fdt_get of src/core/fd/" in out, out


def test_a_call_from_core_into_a_wrapper_fails(tmp_path):
    root = tree(tmp_path)
    # inside libshunt.so, fclose is shunt's own wrapper (src/interpose/)
    add_object(root, "core/conn", "wrapper", "#include <stdio.h>\nvoid shut(FILE *f) { fclose(f); }\n")
    code, out = check(root)
    assert code == 1, out
    assert "core/conn/wrapper.o uses fclose of src/interpose/" in out, out


def test_the_tool_calls_libc_not_the_wrappers(tmp_path):
    root = tree(tmp_path)
    # the tool is a program of its own: its execvp is libc's
    add_object(root, "tool", "runs", "#include <unistd.h>\nint run(char **a) { return execvp(a[0], a); }\n")
    code, out = check(root)
    assert code == 0, out


def test_a_cycle_among_the_rows_fails(tmp_path):
    root = tree(tmp_path)
    doc = root / "docs" / "architecture.md"
    text = doc.read_text()
    row = next(line for line in text.splitlines() if line.startswith("| `src/base/`"))
    cells = row.split("|")
    cells[-2] = " `src/transport/` "
    doc.write_text(text.replace(row, "|".join(cells)))
    code, out = check(root)
    assert code == 1, out
    assert "cycle" in out, out


def test_a_folder_without_a_row_fails(tmp_path):
    root = tree(tmp_path)
    (root / "src" / "core" / "fabric").mkdir()
    add_object(root, "core/fabric", "engine", "int engine(void) { return 0; }\n")
    code, out = check(root)
    assert code == 1, out
    assert "src/core/fabric/ has no row" in out, out
